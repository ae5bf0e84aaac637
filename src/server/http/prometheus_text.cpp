#include "server/http/prometheus_text.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "core/check.h"

namespace pagoda::http {

std::string prometheus_number(double x) {
  char buf[32];
  if (x == std::floor(x) && std::fabs(x) < 1e15) {  // integers in full ("120", not "1.2e+02")
    std::snprintf(buf, sizeof(buf), "%.0f", x);
    return buf;
  }
  std::snprintf(buf, sizeof(buf), "%.17g", x);
  for (int precision = 1; precision <= 17; ++precision) {
    char shorter[32];
    std::snprintf(shorter, sizeof(shorter), "%.*g", precision, x);
    if (std::strtod(shorter, nullptr) == x) return shorter;
  }
  return buf;
}

std::string prometheus_label(std::string_view value) {
  std::string out;
  for (char c : value) {
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    if (c == '\\' || c == '"') out += '\\';
    out += c;
  }
  return out;
}

void prometheus_header(std::string& out, std::string_view name, std::string_view type, std::string_view help) {
  out.append("# HELP ").append(name).append(" ").append(help).append("\n# TYPE ").append(name).append(" ");
  out.append(type).append("\n");
}

void prometheus_sample(std::string& out, std::string_view name, double value) {
  out.append(name).append(" ").append(prometheus_number(value)).append("\n");
}

void prometheus_histogram(std::string& out, std::string_view name, std::string_view help,
                          std::span<const double> bounds, std::span<const int64_t> buckets, double sum,
                          int64_t count) {
  CHECK(buckets.size() == bounds.size() + 1) << "a histogram has one bucket per bound and one above";
  prometheus_header(out, name, "histogram", help);
  const std::string base(name);
  int64_t cumulative = 0;
  for (size_t i = 0; i < bounds.size(); ++i) {
    cumulative += buckets[i];
    prometheus_sample(out, base + "_bucket{le=\"" + prometheus_number(bounds[i]) + "\"}", static_cast<double>(cumulative));
  }
  cumulative += buckets.back();
  prometheus_sample(out, base + "_bucket{le=\"+Inf\"}", static_cast<double>(cumulative));
  prometheus_sample(out, base + "_sum", sum);
  prometheus_sample(out, base + "_count", static_cast<double>(count));
}

}  // namespace pagoda::http
