#include "tools/serve_bench_stats.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

namespace pagoda::tools {

double percentile(std::vector<double> values, double q) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  q = std::clamp(q, 0.0, 1.0);
  const double rank = q * static_cast<double>(values.size() - 1);
  const auto lo = static_cast<size_t>(std::floor(rank));
  const size_t hi = std::min(lo + 1, values.size() - 1);
  const double frac = rank - static_cast<double>(lo);
  return values[lo] + (values[hi] - values[lo]) * frac;
}

Distribution distribution(std::vector<double> values) {
  Distribution d;
  if (values.empty()) return d;
  std::sort(values.begin(), values.end());
  d.count = static_cast<int64_t>(values.size());
  d.mean = std::accumulate(values.begin(), values.end(), 0.0) / static_cast<double>(values.size());
  d.p50 = percentile(values, 0.50);
  d.p90 = percentile(values, 0.90);
  d.p99 = percentile(values, 0.99);
  d.max = values.back();
  return d;
}

BenchSummary summarize(std::span<const RequestRecord> records) {
  BenchSummary s;
  s.requests = static_cast<int64_t>(records.size());
  double first = std::numeric_limits<double>::infinity();
  double last = -std::numeric_limits<double>::infinity();
  std::vector<double> ttft, itl, e2e;
  for (const RequestRecord& r : records) {
    first = std::min(first, r.send_s);
    last = std::max(last, r.end_s);
    for (size_t i = 1; i < r.token_times_s.size(); ++i) {
      itl.push_back(r.token_times_s[i] - r.token_times_s[i - 1]);
    }
    if (!r.ok) {
      ++s.failed;
      ++s.errors[r.error.empty() ? "unknown error" : r.error];
      s.failed_streamed_tokens += static_cast<int64_t>(r.token_times_s.size());
      continue;
    }
    ++s.succeeded;
    if (!r.usage_seen) ++s.missing_usage;
    s.prompt_tokens += r.prompt_tokens;
    s.completion_tokens += r.completion_tokens;
    s.cached_tokens += r.cached_tokens;
    e2e.push_back(r.end_s - r.send_s);
    if (!r.token_times_s.empty()) ttft.push_back(r.token_times_s.front() - r.send_s);
  }
  s.duration_s = records.empty() ? 0 : std::max(0.0, last - first);
  if (s.duration_s > 0) {
    s.requests_per_s = static_cast<double>(s.succeeded) / s.duration_s;
    s.output_tokens_per_s = static_cast<double>(s.completion_tokens) / s.duration_s;
    s.streamed_tokens_per_s = static_cast<double>(s.completion_tokens + s.failed_streamed_tokens) / s.duration_s;
    s.input_tokens_per_s = static_cast<double>(s.prompt_tokens) / s.duration_s;
  }
  if (s.prompt_tokens > 0) {
    s.prefix_cache_hit_rate = static_cast<double>(s.cached_tokens) / static_cast<double>(s.prompt_tokens);
  }
  s.ttft_s = distribution(std::move(ttft));
  s.itl_s = distribution(std::move(itl));
  s.e2e_s = distribution(std::move(e2e));
  return s;
}

}  // namespace pagoda::tools
