#include "server/http/auth.h"

namespace pagoda::http {

std::string bearer_token(std::string_view header) {
  constexpr std::string_view kBearer = "Bearer ";
  if (header.size() > kBearer.size() && header.compare(0, kBearer.size(), kBearer) == 0) {
    return std::string(header.substr(kBearer.size()));
  }
  return {};
}

std::string tenant_cache_salt(bool salt_per_api_key, std::string_view api_key, std::string_view cache_salt) {
  if (!salt_per_api_key) return std::string(cache_salt);
  return "key:" + std::string(api_key) + "\x1f" + std::string(cache_salt);
}

}  // namespace pagoda::http
