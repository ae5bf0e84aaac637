// RoutingRequest: what the router reads from an OpenAI request body to place it, and nothing it
// has to validate (the worker does that, and its errors pass through): the prompt's token ids
// (computed exactly as the worker computes them: model/text/prompt_tokens.h, the same chat template
// and tokenizer), the tenant's cache salt (http::tenant_cache_salt with the caller's key), and
// how much it will generate. A body the router cannot read is still forwarded, placed by load.
//
// block_hashes: the chained hashes (kvcache::hash_block) of the prompt's full blocks that a
// worker could serve from its cache: (num_tokens - 1) / block_size of them, as the worker's
// prefix match leaves the last prompt token to compute.
#pragma once

#include <cstdint>
#include <string>
#include <span>
#include <string_view>
#include <vector>

#include "kvcache/block_hash.h"
#include "model/text/chat_template.h"
#include "model/text/tokenizer.h"

namespace pagoda::router {

struct RoutingRequest {
  bool parsed = false;               // false: not an object we could read (placed by load)
  bool stream = false;
  std::vector<int32_t> tokens;       // the (first) prompt's token ids
  int64_t num_prompts = 1;           // completions may send several (placed by the first)
  int64_t max_tokens = 16;           // per choice, as asked (a load estimate only)
  int64_t num_choices = 1;           // n x prompts
  std::string cache_salt;            // as sent ("" when none)
  std::string api_key;               // the caller's bearer token

  // The salt a worker keys this request's blocks with (http::tenant_cache_salt).
  std::string tenant_salt(bool salt_per_api_key) const;
};

// chat: /v1/chat/completions (messages through the template), else /v1/completions.
RoutingRequest read_routing_request(std::string_view body, bool chat, const model::Tokenizer& tokenizer,
                                    const model::ChatTemplate& chat_template, std::string_view api_key);

// hash_fn: the worker's scheme (kvcache::block_hash_fn of what it advertises).
std::vector<kvcache::BlockHash> prompt_block_hashes(std::span<const int32_t> tokens, int64_t block_size,
                                                    const kvcache::KvNamespace& ns,
                                                    kvcache::BlockHashFn hash_fn = &kvcache::hash_block);

}  // namespace pagoda::router
