#include "sim/cluster_instance.h"

#include <algorithm>
#include <cmath>

namespace pagoda::sim::detail {

Percentiles percentiles(std::vector<double>& xs) {
  Percentiles p;
  if (xs.empty()) return p;
  std::sort(xs.begin(), xs.end());
  auto at = [&](double q) {  // nearest rank
    const size_t k = static_cast<size_t>(std::ceil(q * static_cast<double>(xs.size())));
    return xs[std::min(xs.size() - 1, k > 0 ? k - 1 : 0)];
  };
  p.p50 = at(0.50);
  p.p90 = at(0.90);
  p.p99 = at(0.99);
  double sum = 0;
  for (double x : xs) sum += x;
  p.mean = sum / static_cast<double>(xs.size());
  return p;
}

int32_t generated_token(int64_t r, int64_t k, int32_t vocab) {
  uint64_t x = (static_cast<uint64_t>(r) << 24) ^ static_cast<uint64_t>(k) ^ 0x5DEECE66Dull;
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return static_cast<int32_t>((x ^ (x >> 31)) % static_cast<uint64_t>(vocab));
}

}  // namespace pagoda::sim::detail
