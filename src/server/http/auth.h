// API keys and tenants, the same for every HTTP front: the key a request presents, and the
// cache salt its blocks are hashed with (so `pagoda router` hashes a request's blocks exactly
// as the worker that serves it will).
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace pagoda::http {

// KEY of "Authorization: Bearer KEY"; "" when the header is absent or not of that form.
std::string bearer_token(std::string_view authorization_header);

// Whether `presented` is one of `keys`, in time that depends only on the lengths involved: every
// key is compared, each over all of its bytes, so response timing does not reveal how long a
// prefix of a configured key a guess got right. An empty `presented` never matches.
bool api_key_matches(std::string_view presented, const std::vector<std::string>& keys);

// Equality of a and b in time that depends only on their lengths (no early exit).
bool constant_time_equal(std::string_view a, std::string_view b);

// The salt a request's prefix-cache entries are keyed by. With salt_per_api_key the caller's
// key prefixes it, so tenants never share entries whatever salt they send (no prefix-timing
// side channel between them). The key's length is part of the salt, so no (key, salt) pair can
// spell another tenant's salt.
std::string tenant_cache_salt(bool salt_per_api_key, std::string_view api_key, std::string_view cache_salt);

}  // namespace pagoda::http
