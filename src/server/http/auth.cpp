#include "server/http/auth.h"

namespace pagoda::http {

std::string bearer_token(std::string_view header) {
  constexpr std::string_view kBearer = "Bearer ";
  if (header.size() > kBearer.size() && header.compare(0, kBearer.size(), kBearer) == 0) {
    return std::string(header.substr(kBearer.size()));
  }
  return {};
}

bool constant_time_equal(std::string_view a, std::string_view b) {
  const size_t n = a.size() > b.size() ? a.size() : b.size();
  volatile unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < n; ++i) {
    const unsigned char x = i < a.size() ? static_cast<unsigned char>(a[i]) : 0;
    const unsigned char y = i < b.size() ? static_cast<unsigned char>(b[i]) : 0;
    diff = diff | static_cast<unsigned char>(x ^ y);
  }
  return diff == 0;
}

bool api_key_matches(std::string_view presented, const std::vector<std::string>& keys) {
  bool match = false;
  for (const std::string& k : keys) match = constant_time_equal(presented, k) | match;  // no short circuit
  return match && !presented.empty();
}

std::string tenant_cache_salt(bool salt_per_api_key, std::string_view api_key, std::string_view cache_salt) {
  if (!salt_per_api_key) return std::string(cache_salt);
  return "key:" + std::to_string(api_key.size()) + ":" + std::string(api_key) + "\x1f" + std::string(cache_salt);
}

}  // namespace pagoda::http
