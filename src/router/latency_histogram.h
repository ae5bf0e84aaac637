// LatencyHistogram: the router's own latency record (time to first token, per worker and over
// all), in Prometheus's fixed buckets (the same bounds as the engine's, so the router's and the
// workers' TTFT quantiles compare bucket for bucket), with histogram_quantile's interpolation.
// Not thread-safe: the router guards it (RouterServer::latency_mutex_).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

namespace pagoda::router {

struct LatencyHistogram {
  static constexpr std::array<double, 14> kBounds = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
                                                      0.25, 0.5, 1, 2.5, 5, 10, 30};  // seconds
  std::array<int64_t, kBounds.size() + 1> buckets{};  // non-cumulative; last: > kBounds.back()
  double sum = 0;
  int64_t count = 0;

  void observe(double seconds);
  // The q-quantile as PromQL's histogram_quantile answers it from these buckets (linear inside
  // the bucket; the +Inf bucket answers the highest finite bound); 0 when empty.
  double quantile(double q) const;
};

}  // namespace pagoda::router
