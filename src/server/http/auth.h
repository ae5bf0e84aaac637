// API keys and tenants, the same for every HTTP front: the key a request presents, and the
// cache salt its blocks are hashed with (so `pagoda router` hashes a request's blocks exactly
// as the worker that serves it will).
#pragma once

#include <string>
#include <string_view>

namespace pagoda::http {

// KEY of "Authorization: Bearer KEY"; "" when the header is absent or not of that form.
std::string bearer_token(std::string_view authorization_header);

// The salt a request's prefix-cache entries are keyed by. With salt_per_api_key the caller's
// key prefixes it, so tenants never share entries whatever salt they send (no prefix-timing
// side channel between them).
std::string tenant_cache_salt(bool salt_per_api_key, std::string_view api_key, std::string_view cache_salt);

}  // namespace pagoda::http
