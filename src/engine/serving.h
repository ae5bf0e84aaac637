// ServingEngine: continuous batching of many requests over one Engine (the contract the HTTP
// server codes against). The policy is engine/scheduler.h (which sequences run, chunk sizes,
// admission, victims); the loop, threads, observers and metrics are engine/serving_engine.h.
//
// Threads. submit/abort/metrics/shutdown are thread-safe and never block on a forward pass.
// One loop thread (start()) or the caller (step(), for tests) runs the scheduler; observers are
// called on that thread, must not block, and must not call back into the engine except abort().
//
// Request life: submit -> waiting -> (admitted when its prompt's blocks fit after prefix-cache
// matching, above the free-block watermark) running: prefill in chunks that share steps with
// other sequences' decodes -> decoding -> finished. Under KV pressure the lowest-priority,
// latest-arrived running request is preempted (its blocks freed, recomputed later from prompt +
// tokens so far; the client sees nothing but a delay and identical output). Every request gets
// exactly one on_finish, last. Pinned prefixes (engine/pinning.h, pinner()) take their blocks
// out of what requests may use: submit clips to the unpinned pool, and a waiting request that
// pins taken after its submit leave no room for even alone ends with kTooLarge.
//
// Per step: at most max_num_seqs sequences and max_num_batched_tokens tokens, one forward pass
// over all of them (a ragged batch, attention through each sequence's block table). Decodes
// are scheduled first; prefill chunks share the rest of the token budget.
//
// Choices: n > 1 prefills the prompt once, then forks n sequences sharing its blocks
// (copy-on-write); choice i samples with seed + i, so it equals Engine::generate with that
// seed. A preempted choice keeps its tokens and sampler; it is recomputed (through the prefix
// cache) on re-admission and continues identically.
// Stop token ids and EOS end a choice with kStop; that token is counted in completion_tokens
// but gets no TokenEvent and no text. max_tokens is clipped so that prompt + max_tokens fits
// the context and the choice's KV (prompt + max_tokens - 1) fits the whole pool.
// Windowed KV (StreamingLLM --kv-window/--kv-sinks, sliding-window models that free their old
// blocks): sequences are not prefix-cached (no lookup, no registration) and never forked: the n
// choices of a request are n sequences that each prefill the prompt. max_tokens is clipped to
// the context only (sliding window) or not at all (StreamingLLM, which runs past the context);
// create() refuses a pool smaller than one sequence's window (Engine::kv_token_cap). A
// preempted StreamingLLM choice is recomputed in prefill chunks, so its cache can differ from
// the one its decode built (outputs may then differ from an unpreempted run).
// KV selection (CompletionRequest::kv_select or the engine's --kv-select; H2O/SnapKV): each
// choice is a sequence of its own that prefills the prompt (H2O evicts during the prompt, and
// compaction moves rows inside blocks, so nothing can be shared by a fork); such sequences are
// never prefix-cached (no lookup, no registration; explain and the request dump say so), and a
// swap preemption of one is a recompute. It holds at most its budget of KV tokens (SnapKV: its
// whole prompt until the selection made after the prompt's last chunk); max_tokens is clipped
// to the context, and a request whose selection holds more than the pool is kTooLarge. A
// preempted selecting choice is recomputed in prefill chunks, so its selection (and output)
// may differ from an unpreempted run; the budget holds either way.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "engine/engine.h"
#include "engine/sampler.h"
#include "engine/token_constraint.h"
#include "engine/scheduler.h"
#include "model/text/tokenizer.h"

namespace pagoda::engine {

struct ServingConfig {
  // 0: the limit. Tokens are at most the engine's max_batch_tokens (the forward pass's scratch),
  // sequences at most the tokens (every running sequence may need a row); create() refuses a
  // value above its limit, naming it, rather than clipping it.
  int64_t max_num_seqs = 0;              // sequences (choices) running at once; 0: min(64, tokens)
  int64_t max_num_batched_tokens = 0;    // tokens per step (prefill chunks + decodes); 0: the engine's rows
  int64_t max_waiting = 256;             // queued requests beyond which submit() is refused
  double kv_watermark = 0.01;            // fraction of blocks kept free at admission
  double max_pinned_share = 0.5;         // of the pool's blocks that pins may hold (engine/pinning.h)
  // How a preempted sequence comes back (engine/scheduler.h): recompute its KV, or swap its
  // blocks into the host tier and load them back (without a host tier: recompute, logged).
  PreemptionMode preemption = PreemptionMode::kRecompute;
  // Latency budget of a step while sequences decode (`--step-budget-ms`, engine/scheduler.h):
  // prefill chunks are cut so that the estimated step time (engine/step_cost.h, fitted to the
  // measured steps) stays within it, so a long prompt never stalls the decoding users for a
  // whole max_num_batched_tokens step. 0: off (only max_num_batched_tokens caps a step).
  double step_budget_ms = 100;
};

struct CompletionRequest {
  std::vector<int32_t> prompt;           // token ids, BOS included if wanted
  int64_t max_tokens = 16;               // per choice; clipped to what the context leaves
  SamplingParams sampling = SamplingParams::greedy();  // choice i draws with seed + i
  std::vector<int32_t> stop_token_ids;   // end a choice (the token is not part of its text)
  std::vector<std::string> stop;         // stop strings: text ends before the first match
  bool ignore_eos = false;               // otherwise the model's EOS ends a choice
  int n = 1;                             // choices; they share the prompt's blocks (copy-on-write)
  int logprobs = -1;                     // -1: none; k >= 0: chosen token's logprob + top k (k <= 20)
  int32_t priority = 0;                  // higher: admitted first, preempted last, cached longer
  std::string cache_salt;                // prefix-cache entries are shared only within one salt
  // Attention-score KV selection (H2O/SnapKV, kvcache/kv_select.h) for this request; nullopt:
  // the engine's default (EngineConfig::kv_select, `--kv-select`); method off: none.
  std::optional<kvcache::KvSelectParams> kv_select;
  // Constrained decoding (engine/token_constraint.h): each choice decodes under a clone of it,
  // masked before its sampler. null: unconstrained.
  std::shared_ptr<const TokenConstraint> constraint;
  // P/D disaggregation (engine/pd_coordinator.h). park_kv: when the request ends normally
  // (n 1, not windowed or selecting) its block-manager sequence is kept, every block of its KV
  // (the partly filled last one included), for with_parked(id) to take. adopt_kv >= 0: a
  // block-manager sequence of this engine holding the committed KV of the prompt's first
  // length tokens; an accepted submit hands it to the engine (the request admits onto it,
  // computing only the rest; Scheduler::add), a refused one leaves it with the caller.
  bool park_kv = false;
  kvcache::SeqId adopt_kv = -1;
};

struct TokenLogprob {
  int32_t token = 0;
  float logprob = 0;                     // natural log of the softmax of the raw logits
};

// One generated token of one choice. `text` is the UTF-8-safe text delta it releases (text
// that could still become a stop string or an incomplete character is held back, so text may be
// empty and a later event may release several tokens' worth).
struct TokenEvent {
  int choice = 0;
  int32_t token = 0;
  std::string text;
  TokenLogprob chosen;                   // when logprobs >= 0
  std::vector<TokenLogprob> top;         // logprobs entries, best first
};

struct ChoiceEnd {
  int choice = 0;
  FinishReason reason = FinishReason::kLength;  // kStop: EOS, stop token or stop string
  std::string text;                      // held-back text released at the end (may be empty)
};

// Cached prompt tokens by where they came from: [0] the pool, [1 + i] tier i (loaded).
struct TierTokens {
  std::string_view tier;                 // "pool", Tier::name() (static for the built-in tiers)
  int64_t tokens = 0;
};

struct RequestUsage {
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;         // all choices
  int64_t cached_tokens = 0;             // prompt tokens whose KV came from the prefix cache (pool + tiers)
  // With tiers attached: cached_tokens by source, [num_cached_sources] entries used (0: no tiers).
  std::array<TierTokens, kvcache::kMaxTiers + 1> cached_by_tier{};
  int num_cached_sources = 0;
  double queue_s = 0;                    // submit -> first scheduled
  double ttft_s = 0;                     // submit -> first token
  double e2e_s = 0;                      // submit -> finish
  int64_t preemptions = 0;
};

class RequestObserver {
 public:
  virtual ~RequestObserver() = default;
  virtual void on_tokens(std::span<const TokenEvent> events) = 0;
  virtual void on_choice_end(const ChoiceEnd& end) = 0;
  // The last call. Not ok: the request failed (kAborted when aborted, kUnavailable when shut
  // down without draining, kError when a forward step failed; a request that can never fit is
  // refused by submit() instead); usage holds what was done until then.
  virtual void on_finish(const Status& status, const RequestUsage& usage) = 0;
};

using RequestId = int64_t;
class KvIntrospector;  // engine/introspection.h
class CachePinner;     // engine/pinning.h

// Prometheus-ready numbers (the server renders them). Base units: seconds, tokens, blocks.
struct Histogram {
  static constexpr std::array<double, 14> kBounds = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
                                                      0.25, 0.5, 1, 2.5, 5, 10, 30};
  std::array<int64_t, kBounds.size() + 1> buckets{};  // non-cumulative; last: > kBounds.back()
  double sum = 0;
  int64_t count = 0;
  void observe(double value);
};

// One tier below the pool, for /metrics (`tier` label).
struct TierMetrics {
  std::string name;                      // Tier::name()
  bool enabled = true;                   // false after a fault it cannot recover from
  int64_t capacity_blocks = 0, used_blocks = 0;
  int64_t hit_tokens = 0;                // prompt tokens loaded from it into the pool
  int64_t bytes_read = 0, bytes_written = 0;
  int64_t offloaded_blocks = 0, demoted_blocks = 0, evicted_blocks = 0;
  int64_t failed_loads = 0, corrupt_records = 0, faults = 0;
  int64_t dropped_writes = 0;            // blocks a put did not store, not retried (TierCounters)
  int64_t retried_writes = 0;            // blocks put again after a busy refusal
  kvcache::LatencyBuckets load_latency;  // per get
};

struct ServingMetrics {
  // Counters (monotonic).
  int64_t prompt_tokens = 0;             // prompt tokens of finished-or-running requests
  int64_t generation_tokens = 0;
  // stop/length count choices (n per request); abort (aborted, or shut down without drain)
  // and error count requests.
  int64_t finished_stop = 0, finished_length = 0, finished_abort = 0, finished_error = 0;
  int64_t preemptions = 0;
  // --preemption swap: blocks put into the host tier by preemptions, blocks loaded back on
  // resumption, preemptions done by recompute instead (no host tier).
  int64_t swapped_out_blocks = 0, swapped_in_blocks = 0, swap_fallbacks = 0;
  int64_t evicted_blocks = 0;            // cached blocks dropped by the eviction policy
  int64_t prefix_queried_tokens = 0;     // prompt tokens looked up in the prefix cache
  int64_t prefix_hit_tokens = 0;         // of which found cached
  int64_t steps = 0;
  // Gauges. running: requests with a sequence holding KV; waiting: the others (queued,
  // preempted) and submitted ones not yet seen by the loop.
  int64_t running = 0, waiting = 0;
  int64_t kv_blocks_total = 0, kv_blocks_in_use = 0, kv_blocks_cached = 0, kv_blocks_free = 0;
  // Pins (engine/pinning.h): live pins, the distinct blocks they hold, pins dropped by their ttl.
  int64_t pins = 0, kv_blocks_pinned = 0, pins_expired = 0;
  // Latencies in seconds.
  Histogram ttft, inter_token, e2e, queue;  // inter_token: per choice, between its tokens
  // Tiers below the pool (empty: none), fastest first, and the load-vs-recompute decisions.
  std::vector<TierMetrics> tiers;
  int64_t tier_load_decisions = 0, tier_recompute_decisions = 0;
  // Gauge: tier puts in flight plus committed blocks kept to put again (kvcache/tier_stack.h);
  // a draining server waits for 0 so that SIGTERM loses no write.
  int64_t tier_writes_pending = 0;
  // Mixture of experts (empty for a dense model): [n_layer, n_expert] tokens routed to each
  // expert of each layer (Engine::expert_tokens); layers before moe_first_layer are dense.
  std::vector<int64_t> expert_tokens;
  int64_t n_expert = 0, moe_first_layer = 0;
};

class ServingEngine {
 public:
  // Takes the engine; its block manager is driven only by this object from now on. The
  // tokenizer turns tokens into text (stop strings, text deltas) and names EOS.
  static Result<std::unique_ptr<ServingEngine>> create(std::unique_ptr<Engine> engine,
                                                       std::shared_ptr<const model::Tokenizer> tokenizer,
                                                       const ServingConfig& config);
  virtual ~ServingEngine() = default;

  // Validates and queues. Errors (no observer call then): kInvalidArgument (bad parameters,
  // empty prompt, token ids out of range), kTooLarge (prompt + 1 beyond the context, or more
  // blocks than the whole pool holds), kUnavailable (queue full or shutting down).
  virtual Result<RequestId> submit(CompletionRequest request, std::shared_ptr<RequestObserver> observer) = 0;
  // The request's blocks are freed and on_finish(kAborted) called within one step. Unknown or
  // finished ids are ignored.
  virtual void abort(RequestId id) = 0;

  // Runs the loop on a thread of its own until shutdown().
  virtual void start() = 0;
  // drain: finish all admitted and waiting work first; otherwise abort it. Refuses new work at
  // once, joins the loop thread. Idempotent.
  virtual void shutdown(bool drain) = 0;
  // Without start(): one scheduling step on the caller's thread; false when there was no work.
  virtual bool step() = 0;

  virtual ServingMetrics metrics() const = 0;
  virtual const Engine& engine() const = 0;  // model, KV layout (read-only)
  virtual const model::Tokenizer& tokenizer() const = 0;
  // Test hook: BlockManager::check_integrity() run on the loop thread between steps (or
  // directly when not started or already shut down); aborts on a leaked or miscounted block.
  // Blocks until done.
  virtual void check_integrity() = 0;
  // The KV introspection API (engine/introspection.h); null when this engine has none.
  virtual KvIntrospector* introspector() { return nullptr; }
  // Runs fn with the engine's block manager on the loop thread between two steps (directly
  // when no loop runs) and waits for it: P/D disaggregation's leases and imports
  // (engine/pd_coordinator.h). fn must not block; never call from an observer.
  // Engines without a block manager of their own (test fakes) abort.
  virtual void with_block_manager(const std::function<void(kvcache::BlockManager&)>& fn);
  // The same, with the sequence request `id` parked (CompletionRequest::park_kv; -1 if none):
  // from here on it is fn's, which frees it or keeps it (with the manager's other calls).
  virtual void with_parked(RequestId id, const std::function<void(kvcache::BlockManager&, kvcache::SeqId)>& fn);
  // Pinning prompt prefixes (engine/pinning.h); null when this engine cannot.
  virtual CachePinner* pinner() { return nullptr; }
};

}  // namespace pagoda::engine
