// The Prometheus text writer every /metrics uses (server/http/prometheus_text.h).
#include "server/http/prometheus_text.h"

#include <gtest/gtest.h>

#include <array>

namespace pagoda::http {
namespace {

TEST(PrometheusText, NumbersReadBackExactly) {
  EXPECT_EQ(prometheus_number(120), "120");
  EXPECT_EQ(prometheus_number(0.001), "0.001");
  EXPECT_EQ(prometheus_number(2.5), "2.5");
  EXPECT_EQ(prometheus_number(-3), "-3");
  EXPECT_EQ(std::stod(prometheus_number(1.0 / 3)), 1.0 / 3);
}

TEST(PrometheusText, LabelsAreEscaped) {
  EXPECT_EQ(prometheus_label("http://127.0.0.1:8080"), "http://127.0.0.1:8080");
  EXPECT_EQ(prometheus_label("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
}

TEST(PrometheusText, HistogramIsCumulative) {
  std::string out;
  const std::array<double, 2> bounds = {0.1, 1};
  const std::array<int64_t, 3> buckets = {2, 3, 1};
  prometheus_histogram(out, "x_seconds", "help", bounds, buckets, 4.5, 6);
  EXPECT_EQ(out,
            "# HELP x_seconds help\n# TYPE x_seconds histogram\n"
            "x_seconds_bucket{le=\"0.1\"} 2\nx_seconds_bucket{le=\"1\"} 5\nx_seconds_bucket{le=\"+Inf\"} 6\n"
            "x_seconds_sum 4.5\nx_seconds_count 6\n");
}

}  // namespace
}  // namespace pagoda::http
