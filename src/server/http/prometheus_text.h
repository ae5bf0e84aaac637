// Prometheus text exposition format (version 0.0.4), written by every /metrics of Pagoda
// (`pagoda serve`: server/prometheus.h; `pagoda router`). Checked by `promtool check metrics`
// in the tests. Names carry base units (seconds, tokens, blocks); counters end in _total.
// Each function appends to `out`.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

namespace pagoda::http {

// Shortest text that reads back as the same double ("0.001", "2.5", "30").
std::string prometheus_number(double x);
// A label value with \, " and newlines escaped.
std::string prometheus_label(std::string_view value);

// "# HELP name help" and "# TYPE name type" (counter, gauge, histogram).
void prometheus_header(std::string& out, std::string_view name, std::string_view type, std::string_view help);
// `name` may carry labels: name{key="value"}.
void prometheus_sample(std::string& out, std::string_view name, double value);
// buckets: non-cumulative counts, [bounds.size() + 1] (the last one above bounds.back()).
void prometheus_histogram(std::string& out, std::string_view name, std::string_view help,
                          std::span<const double> bounds, std::span<const int64_t> buckets, double sum,
                          int64_t count);

}  // namespace pagoda::http
