// KV introspection: read-only views of what the KV cache holds and why a prompt would (not) hit,
// for the server's /v1/kv/* API and the dashboard (server/kv_routes.cpp).
//
//   KvSnapshot     the pool (a state per block: the block map), per-tier counters, prefix-cache
//                  and latency numbers, every request with its state and blocks, and the
//                  largest cached prefixes. Taken on the loop thread between two steps, so its
//                  numbers agree with each other and with ServingMetrics of the same moment.
//   RequestKv      one request's block tables (each block's id, ref count, hash, state, tier):
//                  the engine's KV dump as data.
//   KvExplanation  like a database's EXPLAIN, without running anything: how many prompt tokens
//                  would come from the cache and from which tier, where the block chain breaks
//                  and why (ExplainCause).
//
// Tiers. Every block and count carries a tier name: "pool" for the block pool (the device), then
// the names of the tiers below it (Tier::name(): "host", "disk", "redis"). KvSnapshot::tiers has
// a row per tier from the engine's TierStack; a pool block being filled from a lower tier is
// "loading" (kBlockLoading); a request's blocks name the tiers holding copies and where their KV
// was loaded from; explain names the tier each hitting block would come from. Asking a tier
// whether it holds a block is a lookup: the only thing introspection changes is the tier's
// lookup counter and, in the host tier, the block's recency (as a probe at admission would).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"
#include "engine/serving.h"

namespace pagoda::engine {

// One character per pool block in KvSnapshot::block_map.
inline constexpr char kBlockFree = 'f';
inline constexpr char kBlockInUse = 'u';      // held by a running sequence
inline constexpr char kBlockCached = 'c';     // ref 0, hash kept, evictable
inline constexpr char kBlockPinned = 'p';     // cached and pinned (a prefix match or lease holds it)
inline constexpr char kBlockLoading = 'l';    // being filled from a lower tier

struct HistogramSummary {
  int64_t count = 0;
  double sum = 0;
  double p50 = 0, p90 = 0, p99 = 0;  // Prometheus histogram_quantile's interpolation; 0 when empty
};
// The q-quantile as Prometheus's histogram_quantile computes it from the buckets (linear
// interpolation inside the bucket; the +Inf bucket answers the highest finite bound).
double histogram_quantile(const Histogram& h, double q);
HistogramSummary summarize(const Histogram& h);

struct TierSnapshot {
  std::string tier;              // "pool", then each tier below it: "host", "disk", "redis"
  std::string medium;            // KV events' medium: "GPU" for the pool (vLLM's name for it), "CPU", ...
  std::string memory;            // what holds it: "host DRAM" (the pool, on this CPU engine), "disk", "Redis"
  bool enabled = true;           // false once a tier has stopped after a fault
  int64_t capacity_blocks = 0;
  int64_t used_blocks = 0;       // pool: in use + cached; a tier: records it holds
  int64_t hit_blocks = 0;        // pool: blocks served to prefix hits; a tier: blocks loaded from it
  int64_t evictions = 0;
  // Tiers below the pool only (TierStats and TierCounters, kvcache/tier_stack.h).
  int64_t lookups = 0, lookup_hit_blocks = 0;
  int64_t offloaded_blocks = 0;  // put from the pool (eviction or write-through)
  int64_t demoted_blocks = 0;    // put from the tier above (its eviction)
  int64_t bytes_read = 0, bytes_written = 0;
  int64_t failed_loads = 0, corrupt_records = 0, faults = 0;
};

struct RequestSnapshot {
  RequestId id = 0;
  std::string state;             // "waiting", "prefilling", "decoding", "preempted", "loading"
  int64_t prompt_tokens = 0;
  int64_t cached_tokens = 0;     // adopted from the prefix cache at the last admission
  int64_t computed_tokens = 0;   // KV written (max over its choices)
  int64_t generated_tokens = 0;  // all choices
  int64_t blocks_held = 0;       // distinct pool blocks its sequences hold
  int32_t priority = 0;
  int n = 1;
  int64_t preemptions = 0;
  double age_s = 0;              // since submit
};

struct CachedPrefix {
  int64_t num_tokens = 0;        // a chain of cached blocks from the root to a leaf
  int64_t num_blocks = 0;
  int64_t hits = 0;              // times its last block was acquired (allocate, hit, fork)
  double last_use_age_s = -1;    // seconds since its last block was used; -1: before the record
  std::string preview;           // the text of its first tokens
  bool in_use = false;           // some running sequence holds its last block
};

struct KvSnapshot {
  double uptime_s = 0;
  int64_t steps = 0;
  std::string model;             // served model description (general.name / arch)
  // Pool.
  int64_t num_blocks = 0, block_size = 0, bytes_per_block = 0;
  std::string kv_dtype, kv_layout, eviction_policy;
  // free + in_use + cached == num_blocks; pinned is part of cached, loading part of in_use.
  int64_t blocks_free = 0, blocks_in_use = 0, blocks_cached = 0, blocks_pinned = 0, blocks_loading = 0;
  std::string block_map;         // [num_blocks] kBlock* characters (empty unless asked for)
  std::vector<TierSnapshot> tiers;  // [0] the pool, then the tiers below it, fastest first
  // Admissions that found blocks in a tier: loaded them, or recomputed (the cost model's call).
  int64_t tier_load_decisions = 0, tier_recompute_decisions = 0;
  int64_t tier_loads_in_flight = 0;
  std::string preemption = "recompute";  // --preemption: "recompute" or "swap" (metrics: swap counters)
  // Prefix cache (BlockManagerStats).
  bool prefix_caching = true;
  int64_t lookups = 0, committed_blocks = 0, cow_copies = 0, blocks_allocated = 0;
  ServingMetrics metrics;        // the same moment's counters, gauges and histograms
  std::vector<RequestSnapshot> requests;  // by id
  std::vector<CachedPrefix> top_prefixes; // longest first
};

struct SnapshotOptions {
  bool block_map = true;
  bool requests = true;
  int max_prefixes = 8;
  int preview_tokens = 24;
};

struct BlockSnapshot {
  int64_t index = 0;             // position in the table: tokens [index*B, (index+1)*B)
  int32_t block = -1;            // pool block id; -1: a released window hole
  int32_t ref_count = 0;
  std::string state;             // "in use", "cached", "free", "released", "loading" (being read
                                 // from loaded_from into the pool; unreadable until done)
  std::string tier = "pool";     // where the block lives (every block of a table is a pool block)
  std::vector<std::string> copies;  // tiers below the pool holding a copy now, fastest first
  std::string loaded_from;       // the tier its KV was (or is being) loaded from ("": computed here)
  uint64_t hash = 0;             // 0 while not registered in the prefix index
  int64_t num_tokens = 0;        // tokens the block holds for this sequence
  bool shared = false;           // ref > 1 (a fork or another request shares it)
};

struct SequenceKv {
  int choice = 0;
  bool running = false;
  int64_t length = 0;            // KV tokens held
  // KV selection ("" none, else "h2o budget 64 recent 32"): such a sequence is never
  // prefix-cached (its rows move between blocks); kv_evicted rows dropped so far.
  std::string kv_select;
  int64_t kv_evicted = 0;
  std::vector<BlockSnapshot> blocks;
};

struct RequestKv {
  RequestSnapshot request;
  std::vector<SequenceKv> sequences;  // one per live choice (one before the fork)
};

enum class ExplainCause {
  kFullHit,            // every full block before the last token hits: nothing more can
  kNeverSeen,          // the block was never cached (with this prefix) or fell out of the record
  kEvicted,            // it was cached and evicted (the record of recent evictions has it)
  kSaltDiffers,        // the same tokens are cached under another cache_salt (tenant)
  kModelDiffers,       // ... by another model
  kKvFormatDiffers,    // ... in another KV format (dtype, layout, block size)
  kTemplateRewrite,    // the chat template renders an earlier turn differently now
  kWindow,             // a windowed model or --kv-window: nothing is prefix-cached
  kKvSelect,           // the request selects its KV (H2O/SnapKV): it is never prefix-cached
  kPrefixCacheOff,     // --no-prefix-cache
  kTooShort,           // the prompt has no full block before its last token
};
const char* explain_cause_name(ExplainCause cause);  // "full_hit", "never_seen", ...

struct ExplainBlock {
  int64_t index = 0;
  uint64_t hash = 0;             // chained hash under the request's namespace
  std::string where;             // "pool" (a tier name), or "miss"
};

struct TierHit {
  std::string tier;
  int64_t blocks = 0, tokens = 0;
};

struct KvExplanation {
  int64_t prompt_tokens = 0;
  int64_t block_size = 0;
  int64_t cacheable_tokens = 0;      // full blocks before the last token: the most that can hit
  int64_t hit_tokens = 0;            // would come from the cache
  int64_t compute_tokens = 0;        // prompt_tokens - hit_tokens
  std::vector<TierHit> tiers;        // where the hit comes from, fastest first
  ExplainCause cause = ExplainCause::kFullHit;  // why the chain ends at hit_tokens
  int64_t break_block = -1;          // first block that misses (-1: none)
  std::string detail;                // a sentence for a person
  double evicted_age_s = -1;         // kEvicted: seconds since the eviction
  int64_t diverge_token = -1;        // where the prompt leaves the longest cached continuation
                                     // (or the earlier turn, for kTemplateRewrite); -1: unknown
  int64_t other_ns_hit_tokens = 0;   // k*Differs: tokens that would hit under the other namespace
  int64_t partial_tail_tokens = 0;   // tokens after the last cacheable block (always computed)
  std::vector<ExplainBlock> blocks;  // the hits, then the breaking block
};

struct ExplainRequest {
  std::vector<int32_t> prompt;
  std::string cache_salt;
  // Chat: what the cache held after earlier turns (that turn's prompt, rendered to ask for the
  // reply, + the reply) when the conversation no longer renders them as they were; where one
  // leaves `prompt` before the chain breaks, the cause is a template rewrite.
  std::vector<std::vector<int32_t>> earlier_turns;
  std::optional<kvcache::KvSelectParams> kv_select;  // as CompletionRequest::kv_select (nullopt: the default)
};

// What the server asks of a serving engine that can show its cache. Each call runs on the
// engine's loop thread between two steps (or directly when no loop runs) and never changes any
// state of the pool or the requests (no recency, no counters; tiers: see Tiers at the top).
class KvIntrospector {
 public:
  virtual ~KvIntrospector() = default;
  virtual KvSnapshot snapshot(const SnapshotOptions& options) = 0;
  // kNotFound for an unknown or finished request.
  virtual Result<RequestKv> request_kv(RequestId id) = 0;
  virtual Result<KvExplanation> explain(const ExplainRequest& request) = 0;
};

}  // namespace pagoda::engine
