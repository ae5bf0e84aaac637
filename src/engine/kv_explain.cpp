// explain_prefix: the order of causes is at the top of engine/kv_inspect.h.
#include <algorithm>
#include <bit>
#include <cstdio>
#include <tuple>

#include "engine/kv_inspect.h"

namespace pagoda::engine {

const char* explain_cause_name(ExplainCause cause) {
  switch (cause) {
    case ExplainCause::kFullHit: return "full_hit";
    case ExplainCause::kNeverSeen: return "never_seen";
    case ExplainCause::kEvicted: return "evicted";
    case ExplainCause::kSaltDiffers: return "salt_differs";
    case ExplainCause::kModelDiffers: return "model_differs";
    case ExplainCause::kKvFormatDiffers: return "kv_format_differs";
    case ExplainCause::kTemplateRewrite: return "template_rewrite";
    case ExplainCause::kWindow: return "window";
    case ExplainCause::kKvSelect: return "kv_select";
    case ExplainCause::kPrefixCacheOff: return "prefix_cache_off";
    case ExplainCause::kTooShort: return "too_short";
  }
  return "?";
}

namespace {

using kvcache::BlockHash;
using kvcache::PrefixIndex;

std::string seconds(double s) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f s", s);
  return buf;
}

// The longest run of matching tokens between prompt block `index` and any cached child of
// `parent` (kRoot: a first block) in namespace ns: {tokens in common, child block}.
std::pair<int64_t, int32_t> longest_cached_continuation(const kvcache::BlockManager& bm, int32_t parent,
                                                        const kvcache::KvNamespace& ns,
                                                        std::span<const int32_t> block_tokens) {
  const PrefixIndex& index = bm.index();
  int64_t best = -1;
  int32_t best_block = -1;
  for (int32_t b = 0; b < static_cast<int32_t>(bm.pool().num_blocks()); ++b) {
    if (!index.contains(b) || index.parent(b) != parent || !(index.ns(b) == ns)) continue;
    const std::span<const int32_t> cached = index.tokens(b);
    int64_t common = 0;
    while (common < static_cast<int64_t>(block_tokens.size()) && cached[common] == block_tokens[common]) ++common;
    if (common > best) {
      best = common;
      best_block = b;
    }
  }
  return {best, best_block};
}

// First position where `earlier` and `prompt` differ; earlier.size() when it is a prefix.
int64_t divergence(std::span<const int32_t> earlier, std::span<const int32_t> prompt) {
  const size_t n = std::min(earlier.size(), prompt.size());
  size_t i = 0;
  while (i < n && earlier[i] == prompt[i]) ++i;
  return static_cast<int64_t>(i == n && earlier.size() > prompt.size() ? n : i);
}

// Which namespace fields differ, most fundamental first.
ExplainCause namespace_cause(const kvcache::KvNamespace& want, const kvcache::KvNamespace& other) {
  if (want.model_fingerprint != other.model_fingerprint) return ExplainCause::kModelDiffers;
  if (want.kv_format != other.kv_format) return ExplainCause::kKvFormatDiffers;
  return ExplainCause::kSaltDiffers;
}

bool explain_namespaces(const ExplainContext& c, std::span<const int32_t> prompt, int64_t max_blocks, int64_t hit,
                        KvExplanation& e) {
  if (c.history == nullptr) return false;
  const int64_t B = c.blocks->pool().layout().block_size;
  std::vector<int32_t> chain;
  int64_t best = hit;
  kvcache::KvNamespace best_ns;
  for (const KvHistory::SeenNamespace& seen : c.history->namespaces()) {
    if (seen.ns == c.ns) continue;
    chain.clear();
    const int64_t k = c.blocks->index().match(prompt, seen.ns, max_blocks, c.blocks->hash_fn(), chain);
    if (k > best) {
      best = k;
      best_ns = seen.ns;
    }
  }
  if (best == hit) return false;
  e.cause = namespace_cause(c.ns, best_ns);
  e.other_ns_hit_tokens = best * B;
  const char* what = e.cause == ExplainCause::kModelDiffers      ? "another model"
                     : e.cause == ExplainCause::kKvFormatDiffers ? "another KV format (dtype, layout or block size)"
                                                                 : "another cache_salt (tenant)";
  e.detail = std::to_string(best * B) + " tokens of this prompt are cached for " + what +
             "; cache entries are never shared across namespaces, so they cannot hit here";
  return true;
}

bool explain_template(std::span<const int32_t> prompt, std::span<const std::vector<int32_t>> earlier_turns,
                      int64_t break_end, KvExplanation& e) {
  for (const std::vector<int32_t>& turn : earlier_turns) {
    const int64_t d = divergence(turn, prompt);
    if (d >= static_cast<int64_t>(turn.size()) || d >= break_end) continue;
    e.cause = ExplainCause::kTemplateRewrite;
    e.diverge_token = d;
    e.detail = "an earlier turn of this conversation was sent as a prompt that differs from this one at token " +
               std::to_string(d) + " (of its " + std::to_string(turn.size()) +
               "): the chat template (or tokenization at a turn boundary) rewrites earlier turns, so the blocks "
               "cached for that turn cannot be reused";
    return true;
  }
  return false;
}

// "N tokens would come from the pool and M from host (loaded into the pool first); " when a tier
// below the pool would serve some of the hit, else "".
std::string hit_sources(const KvExplanation& e) {
  std::string below;
  for (size_t t = 1; t < e.tiers.size(); ++t) {
    if (e.tiers[t].tokens == 0) continue;
    below += (below.empty() ? "" : ", ") + std::to_string(e.tiers[t].tokens) + " from " + e.tiers[t].tier;
  }
  if (below.empty()) return "";
  return std::to_string(e.tiers[0].tokens) + " tokens would come from the pool and " + below +
         " (loaded into the pool first); ";
}

}  // namespace

KvExplanation explain_prefix(const ExplainContext& c, std::span<const int32_t> prompt,
                             std::span<const std::vector<int32_t>> earlier_turns) {
  CHECK(c.blocks != nullptr);
  const kvcache::BlockManager& bm = *c.blocks;
  const int64_t B = bm.pool().layout().block_size;
  const int64_t n = static_cast<int64_t>(prompt.size());
  KvExplanation e;
  e.prompt_tokens = n;
  e.block_size = B;
  const int64_t max_blocks = n > 0 ? (n - 1) / B : 0;
  e.cacheable_tokens = max_blocks * B;
  e.partial_tail_tokens = n - e.cacheable_tokens;
  e.tiers.push_back({"pool", 0, 0});
  for (const std::string& name : c.tier_names) e.tiers.push_back({name, 0, 0});
  auto finish = [&](ExplainCause cause, std::string detail) {
    e.cause = cause;
    e.detail = std::move(detail);
    e.compute_tokens = n - e.hit_tokens;
    return e;
  };
  if (c.windowed) {
    return finish(ExplainCause::kWindow, "this engine keeps a sliding window of KV (a windowed model or --kv-window): "
                                         "its sequences drop blocks and are never prefix-cached");
  }
  if (!c.kv_select.empty()) {
    return finish(ExplainCause::kKvSelect, "this request selects its KV by attention score (" + c.kv_select +
                                               "): evicted rows leave its blocks and the rest move between them, so "
                                               "it is never prefix-cached (no lookup, no registration)");
  }
  if (!c.prefix_caching) return finish(ExplainCause::kPrefixCacheOff, "the prefix cache is off (--no-prefix-cache)");
  if (max_blocks == 0) {
    return finish(ExplainCause::kTooShort, "the prompt has no full block of " + std::to_string(B) +
                                               " tokens before its last token; only full blocks are cached");
  }

  std::vector<int32_t> chain;
  const int64_t k = bm.index().match(prompt, c.ns, max_blocks, bm.hash_fn(), chain);
  const uint64_t ns_key = c.ns.key();
  std::vector<BlockHash> hashes;  // [blocks hashed so far] the prompt's chained block hashes
  auto hash_at = [&](int64_t i) {
    while (static_cast<int64_t>(hashes.size()) <= i) {
      const BlockHash parent = hashes.empty() ? kvcache::kRootBlockHash : hashes.back();
      hashes.push_back(bm.hash_fn()(parent, prompt.subspan(hashes.size() * B, B), ns_key));
    }
    return hashes[static_cast<size_t>(i)];
  };
  for (int64_t i = 0; i < k; ++i) e.blocks.push_back({i, hash_at(i), "pool"});
  e.tiers[0].blocks = k;
  // Below the pool: each next block from the fastest tier that holds it.
  const uint32_t tier_mask = c.tier_names.size() >= 32 ? ~0u : (1u << c.tier_names.size()) - 1;
  int64_t reach = k;  // blocks that would hit, pool and tiers
  while (c.tier_holders && reach < max_blocks) {
    const uint32_t holders = c.tier_holders(hash_at(reach)) & tier_mask;
    if (holders == 0) break;
    const int t = std::countr_zero(holders);
    e.blocks.push_back({reach, hash_at(reach), c.tier_names[static_cast<size_t>(t)]});
    ++e.tiers[static_cast<size_t>(t) + 1].blocks;
    ++reach;
  }
  for (TierHit& t : e.tiers) t.tokens = t.blocks * B;
  e.hit_tokens = reach * B;
  const std::string sources = hit_sources(e);
  if (reach == max_blocks) {
    return finish(ExplainCause::kFullHit,
                  sources + "every full block before the last token is cached; the last " +
                      std::to_string(e.partial_tail_tokens) +
                      " tokens (the partial last block and the last token, whose logits are needed) are computed");
  }
  e.blocks.push_back({reach, hash_at(reach), "miss"});
  e.break_block = reach;
  e.compute_tokens = n - e.hit_tokens;
  const BlockHash missing = hash_at(reach);
  if (c.history != nullptr) {
    if (std::optional<int64_t> at = c.history->evicted_at_ns(missing)) {
      e.cause = ExplainCause::kEvicted;
      e.evicted_age_s = static_cast<double>(c.now_ns - *at) * 1e-9;
      e.detail = sources + "block " + std::to_string(reach) + " (tokens " + std::to_string(reach * B) + ".." +
                 std::to_string((reach + 1) * B) + ") was cached and evicted " + seconds(e.evicted_age_s) +
                 " ago to make room" +
                 (c.tier_names.empty() ? "" : ", and no tier below the pool holds it (dropped at the bottom or never written down)") +
                 "; a larger --kv-cache-mem" + (c.tier_names.empty() ? "" : " or larger tiers") +
                 " or a higher request priority keeps it longer";
      return e;
    }
  }
  if (explain_namespaces(c, prompt, max_blocks, reach, e) ||
      explain_template(prompt, earlier_turns, (reach + 1) * B, e)) {
    e.detail = sources + e.detail;
    return e;
  }
  e.cause = ExplainCause::kNeverSeen;
  int64_t common = 0;
  int32_t other = -1;
  if (reach == k) {  // the chain's last block is in the pool: its cached children can be compared
    const int32_t parent_block = k == 0 ? PrefixIndex::kRoot : chain[static_cast<size_t>(k - 1)];
    std::tie(common, other) = longest_cached_continuation(bm, parent_block, c.ns, prompt.subspan(k * B, B));
  }
  if (other >= 0) {
    e.diverge_token = k * B + common;
    e.detail = "block " + std::to_string(k) + " was never cached after this prefix: the cached continuation " +
               "differs from the prompt at token " + std::to_string(e.diverge_token);
  } else {
    e.detail = "block " + std::to_string(reach) + " (tokens " + std::to_string(reach * B) + ".." +
               std::to_string((reach + 1) * B) + ") was never cached" + (reach == 0 ? "" : " after this prefix") +
               " (or was evicted before the last " + std::to_string(KvHistory::kEvictionSlots) +
               " evictions on record)";
  }
  e.detail = sources + e.detail;
  return e;
}

}  // namespace pagoda::engine
