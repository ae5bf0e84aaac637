// The pieces of KV introspection (engine/introspection.h) that need only a block manager, so
// they are tested over a bare pool: the block map, the largest cached prefixes, and explain.
//
// explain_prefix, for a prompt under a namespace, without pinning, counting or touching recency:
//   1. the most that can hit: the full blocks before the last token (cacheable_tokens);
//   2. the longest chain of cached blocks confirmed token by token (the prefix index's match);
//   3. why the chain ends where it does, for the first block that misses, in this order:
//        evicted            its hash is in the record of recent evictions (KvHistory);
//        model / KV format / salt differs
//                           under a namespace that stored blocks recently the same prompt
//                           matches further (the fields that differ name the cause);
//        template rewrite   an earlier turn's prompt is not a token prefix of this one and
//                           diverges before the end of the breaking block;
//        never seen         none of these: the block was never cached after this prefix (or
//                           fell out of the record); the longest cached continuation of the
//                           prefix is named, with the token where the prompt leaves it;
//      and before any lookup: window (windowed sequences are never cached), prefix cache off,
//      too short (no full block before the last token). A chain that reaches cacheable_tokens
//      is a full hit: only the partial tail (the last partial block and the last token) is
//      computed.
//   Tiers: where the pool's chain ends, the tiers below it (ExplainContext::tier_holders) are
//   asked block by block, as admission loads: each next block held by a tier hits there (the
//   fastest holder), until one no tier holds; that block is the break, and its cause is found
//   as above (an evicted block that no tier holds was dropped below, or never written down).
//   A tier's answer only proposes (its lookup does not confirm token ids, as a load does).
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "engine/introspection.h"
#include "engine/kv_history.h"
#include "kvcache/block_manager.h"
#include "kvcache/tier_stack.h"
#include "model/text/tokenizer.h"

namespace pagoda::engine {

struct ExplainContext {
  const kvcache::BlockManager* blocks = nullptr;
  const KvHistory* history = nullptr;  // null: no record (evictions and namespaces unknown)
  kvcache::KvNamespace ns;             // the request's
  bool prefix_caching = true;
  bool windowed = false;
  std::string kv_select;               // the request's selection ("" none): never prefix-cached
  int64_t now_ns = 0;                  // for ages
  // The tiers below the pool, fastest first (empty: none), and which of them hold a block now:
  // bit t for tier_names[t], as far as a lookup answered at once tells (TierStack::holders_now).
  std::vector<std::string> tier_names;
  std::function<uint32_t(kvcache::BlockHash)> tier_holders;
};

KvExplanation explain_prefix(const ExplainContext& context, std::span<const int32_t> prompt,
                             std::span<const std::vector<int32_t>> earlier_turns = {});

// Pool counts (free / in use / cached / pinned / loading) and, when block_map, one kBlock* char
// per block; out.tiers becomes the pool's row.
void snapshot_pool(const kvcache::BlockManager& blocks, bool block_map, KvSnapshot& out);
// Appends a row per tier of the stack (its TierStats and the stack's TierCounters).
void snapshot_tiers(const kvcache::TierStack& tiers, KvSnapshot& out);

// The longest chains root -> leaf of the prefix index, longest first (ties: most hits, then
// lowest block id), at most max_prefixes; the preview decodes the first preview_tokens tokens
// (no preview when tokenizer is null).
std::vector<CachedPrefix> largest_prefixes(const kvcache::BlockManager& blocks, const KvHistory* history,
                                           const model::Tokenizer* tokenizer, int64_t now_ns, int max_prefixes,
                                           int preview_tokens);

}  // namespace pagoda::engine
