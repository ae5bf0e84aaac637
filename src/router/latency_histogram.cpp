#include "router/latency_histogram.h"

namespace pagoda::router {

void LatencyHistogram::observe(double seconds) {
  std::size_t b = 0;
  while (b < kBounds.size() && seconds > kBounds[b]) ++b;
  ++buckets[b];
  sum += seconds;
  ++count;
}

double LatencyHistogram::quantile(double q) const {
  int64_t total = 0;
  for (int64_t c : buckets) total += c;
  if (total == 0) return 0;
  const double rank = q * static_cast<double>(total);
  int64_t cumulative = 0;
  for (std::size_t b = 0; b < kBounds.size(); ++b) {
    const int64_t before = cumulative;
    cumulative += buckets[b];
    if (static_cast<double>(cumulative) >= rank) {
      const double start = b == 0 ? 0.0 : kBounds[b - 1];
      const double in_bucket = static_cast<double>(cumulative - before);
      return start + (kBounds[b] - start) * ((rank - static_cast<double>(before)) / in_bucket);
    }
  }
  return kBounds.back();
}

}  // namespace pagoda::router
