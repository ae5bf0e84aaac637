// Scheduler: the continuous-batching policy of the serving loop (engine/serving_engine.cpp):
// which sequences run in the next step, how many tokens each, which wait, which are admitted
// and which are preempted. It drives a kvcache::BlockManager (admission, preemption, forks)
// and never sees a model, so it is tested over a bare block pool (tests/engine/scheduler_test).
//
// A Sequence is one choice of a request, or, before a request with n > 1 choices has sampled
// its first token, the one prompt sequence all its choices will fork from (it holds `slots` =
// n sequence slots from admission on). Its `tokens` are everything it has fed or will feed:
// prompt + generated. Running, its KV covers tokens[0, computed) (computed = the block
// manager's length); the rest is pending. A step feeds a sequence some of its pending tokens;
// when a step reaches the end of `tokens` the owner samples the next token and appends it
// (pending 1: decoding). Prefill, decode and recompute after preemption are the same thing.
//
// States: waiting --admit--> running --preempt--> waiting (KV freed; tokens kept: recompute)
//         any --remove--> gone (finished or aborted; KV freed)
//         running --release_kv--> gone (its block-manager sequence handed to the caller)
// Adopted KV (add(..., adopt): P/D disaggregation's decode side, engine/pd_coordinator.h): a
// block-manager sequence built outside (KV of the prompt's first length tokens, written and
// committed; the last block may be partly filled) that the sequence owns while waiting. Its
// first admission runs on it instead of a prefix match: only the rest of the prompt is fed.
// If the rest does not fit while others run it waits, keeping that KV; if it does not fit even
// alone, or the sequence is windowed or selecting, the adopted sequence is freed and admission
// goes the ordinary way (its committed blocks stay cached). Preempted later, it recomputes like
// any other (adoption is for the first admission only).
// Preemption (SchedulerOptions::preemption, `--preemption`):
//   recompute (the default): the victim's blocks are freed; its committed full blocks stay
//     cached in the pool like any other (and go down to the tiers when the pool evicts them,
//     with write-back); on re-admission whatever is still found is reused, the rest recomputed.
//   swap: before its blocks are freed, every committed full block of the victim is put into
//     tier 0, which must be the host DRAM tier (medium "CPU"): TierStack::put_blocks copies
//     the bytes during the call. On re-admission the sequence goes through the ordinary
//     admission path (pool hit, tier probe, load) except that the cost model is not asked: what
//     the tiers hold of it is loaded. The partly filled last block has no hash: it is
//     recomputed (at most block_size - 1 tokens). Output equals an unpreempted run either way.
//     Without a host tier (none, not the first, or disabled) a swap preemption is a recompute
//     one, counted in StepPlan::swap_fallbacks (the serving engine logs why at create()).
//
// Order: (priority desc, arrival asc, choice asc). Each step (schedule()):
//   1. Running sequences in order. Decoding ones (pending 1) get one token each; those still
//      prefilling share what is left of max_num_batched_tokens after the decodes, in order
//      (chunked prefill). Latency budget (step_budget_ns > 0 with a step_cost model): while any
//      sequence decodes, the step takes at most the tokens whose estimated time fits the budget
//      (StepCostModel::tokens_within), at least decodes + min_prefill_tokens (prefill always
//      progresses) and never more than max_num_batched_tokens; the cap holds for admissions too.
//      With nobody decoding nobody waits on the step, so it is not capped. If the blocks of a sequence's tokens do not fit, the last running
//      sequence in order is preempted (the victim: lowest priority, latest arrival), until
//      they fit or the sequence itself is the victim.
//   2. Only if nobody was preempted: waiting sequences in order are admitted while their slots
//      fit under max_num_seqs, a token of budget is left and their blocks fit after
//      prefix-cache matching, keeping `watermark_blocks` free (not when nothing else runs).
//      The first that does not fit stops admission (no overtaking by lower priority). If it
//      does not fit while nothing runs, it never will (pinned blocks, engine/pinning.h, took
//      the room it was clipped to): it goes to `refused`, stays waiting until its owner removes
//      it, and admission stops for this step (nothing is scheduled then).
// Windowed KV (SchedulerOptions::windows; the engine's StreamingLLM or a sliding-window model
// that frees its old blocks): sequences are added uncacheable (no prefix-cache lookup, no
// registration) and are never forked (the owner adds n independent sequences instead). A
// sequence's progress is `fed`, not the block manager's length, which StreamingLLM shrinks when
// it drops blocks. Block needs count what the engine's step frees first (StreamingLLM drops the
// oldest non-sink blocks before appending), admission needs at most kv_token_cap tokens' blocks,
// and a StreamingLLM prefill chunk is at most max_chunk tokens (Engine::prefill_chunk).
// Selecting sequences (SchedSequence::select on: H2O/SnapKV, kvcache/kv_select.h) are handled
// like windowed ones, per sequence: uncacheable (no lookup, no registration, no tier load, so a
// swap preemption is a recompute one), never forked, admitted for the KV they hold at most
// (H2O: budget; SnapKV: max(prompt, budget), its whole prompt until the selection), and fed in
// chunks the engine's eviction allows: H2O at most kv_select_max_chunk rows per step (prompt
// included); SnapKV's chunks end at the prompt's end (the last one holds the observation
// window, and the selection runs before the next step), later ones (recompute after
// preemption) at most kv_select_max_chunk. blocks_needed counts the blocks left after the
// eviction the step does first (BlockManager::plan), so the budget holds in every step.
// Invariants: sum of slots of running sequences <= max_num_seqs; every scheduled token's block
// is accounted for before the step runs (Engine::step never runs out); a sequence that is the
// only one running always fits (the owner clips a request to the pool at submit).
//
// Tiers (options.tiers, kvcache/tier_stack.h). Admission matches the pool first, then probes
// the tiers for the whole blocks after the pool hit; the LoadCostModel decides how many of the
// found blocks to load. Those are allocated at once (BlockManager::begin_load) and read by tier
// gets; the sequence is *running* (it holds its blocks and slots) but *loading*: it is never
// scheduled and never a preemption victim until its load is in. Right after starting a load
// admission polls the stack once: a load already complete (the host tier copies during the get)
// is finished at once and the sequence is scheduled in the same step like any admission.
// schedule() first polls the stack (never waits) and finishes every completed load
// (BlockManager::finish_load: what did not load or confirm is recomputed). A probe a tier answers later (a remote tier) holds
// admission for that sequence until a later step; its runs are then lined up with that step's
// pool hit (blocks the pool gained meanwhile are skipped; if it lost some, the tiers are probed
// again from the hit). A loading sequence that is removed is
// detached: its blocks are freed once its gets have completed.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "kvcache/block_manager.h"
#include "kvcache/tier_stack.h"

namespace pagoda::engine {

class LoadCostModel;
class StepCostModel;

enum class PreemptionMode : uint8_t { kRecompute, kSwap };
std::string_view preemption_mode_name(PreemptionMode mode);  // "recompute", "swap"
std::optional<PreemptionMode> preemption_mode_from_name(std::string_view name);

struct SchedulerOptions {
  int64_t max_num_seqs = 64;             // sequence slots held by running sequences
  int64_t max_num_batched_tokens = 512;  // tokens per step
  int64_t watermark_blocks = 0;          // kept free at admission
  bool enable_prefix_caching = true;
  kvcache::TierStack* tiers = nullptr;   // lower tiers to load prefixes from (not owned)
  LoadCostModel* load_cost = nullptr;    // load vs recompute (nullptr: always load)
  PreemptionMode preemption = PreemptionMode::kRecompute;
  // Prefill chunks sized by a latency budget (step 1 at the top): 0 or no model: off.
  int64_t step_budget_ns = 0;
  const StepCostModel* step_cost = nullptr;  // not owned; read at each schedule()
  int64_t min_prefill_tokens = 32;           // per step under the budget, when a prefill is pending
  struct Windows {
    bool on = false;           // sequences drop or release blocks (uncacheable, never forked)
    int64_t stream_sinks = 0;  // StreamingLLM: cache holds at most stream_sinks + stream_window
    int64_t stream_window = 0; // tokens (0: not streaming); both whole blocks
    int64_t kv_token_cap = 0;  // > 0: KV tokens a sequence holds at once at most (admission)
    int64_t max_chunk = 0;     // > 0: tokens per prefill chunk at most
  } windows;
};

struct SeqKey {
  int32_t priority = 0;
  uint64_t arrival = 0;  // submit order
  int32_t choice = 0;
  // Scheduling order: higher priority, then earlier arrival, then lower choice first.
  bool before(const SeqKey& o) const {
    if (priority != o.priority) return priority > o.priority;
    if (arrival != o.arrival) return arrival < o.arrival;
    return choice < o.choice;
  }
};

using SchedSeqId = int64_t;

struct SchedSequence {
  SchedSeqId id = -1;
  SeqKey key;
  std::vector<int32_t> tokens;   // [prompt + generated] fed or to feed
  int64_t max_tokens = 0;        // KV table reserve (prompt + max generated)
  int32_t slots = 1;             // sequence slots held while running (n before the fork)
  kvcache::KvNamespace ns;       // prefix-cache namespace (model, KV format, salt)
  kvcache::KvSelectParams select;  // on: attention-score selection (normalized), see the top
  int64_t select_prompt = 0;     // selecting: prompt tokens (SnapKV's window ends there)
  kvcache::SeqId kv = -1;        // block-manager sequence while running, else -1
  int64_t fed = 0;               // tokens[0, fed) have KV computed (or scheduled) while running
  int64_t admitted_cached = 0;   // tokens adopted from the prefix cache (pool + tiers) at the last admission
  int64_t admitted_pool = 0;     // of which from the pool
  std::array<int64_t, kvcache::kMaxTiers> admitted_tier{};  // of which loaded from tier i
  int64_t num_admissions = 0;    // > 1: resumed after preemption
  kvcache::ProbeId probe = 0;    // waiting: a probe of the tiers in flight (0: none)
  int64_t probe_from = 0;        // the pool hit (blocks) the probe's chain starts after
  kvcache::LoadId load = 0;      // running: its blocks are loading (0: not loading)
  std::vector<kvcache::TierRun> load_runs;  // where the loading blocks come from (chain from admitted_pool)
  bool swapped = false;          // waiting: preempted by swap (its blocks were put into tier 0)
  bool swap_in = false;          // running: its load brings back swapped blocks
  kvcache::SeqId adopt = -1;     // waiting, never admitted: adopted KV (see the top; owned)
  bool running() const { return kv >= 0; }
  bool loading() const { return load != 0; }
};

struct ScheduledSeq {
  SchedSequence* seq = nullptr;
  int64_t begin = 0;     // first token fed: tokens[begin, begin + n_tokens)
  int64_t n_tokens = 0;
  bool completes() const { return begin + n_tokens == static_cast<int64_t>(seq->tokens.size()); }
};

struct StepPlan {
  std::vector<ScheduledSeq> scheduled;     // in order; at most max_num_seqs
  std::vector<SchedSequence*> preempted;   // this step's victims (now waiting)
  std::vector<SchedSequence*> admitted;    // admitted this step (also in scheduled unless loading)
  std::vector<SchedSequence*> loaded;      // whose load finished this step (still running)
  std::vector<SchedSequence*> refused;     // can never fit beside the pinned blocks: owner removes
  int64_t num_tokens = 0;
  // Prefix-cache lookups of this step's admissions.
  int64_t prefix_queried_tokens = 0, prefix_hit_tokens = 0;
  // Swap preemption: blocks put into tier 0 by this step's preemptions, blocks loaded back by
  // this step's finished loads of swapped sequences, swap preemptions done by recompute.
  int64_t swapped_out_blocks = 0, swapped_in_blocks = 0, swap_fallbacks = 0;
  void clear();
};

class Scheduler {
 public:
  Scheduler(kvcache::BlockManager& blocks, const SchedulerOptions& options);
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;
  ~Scheduler();  // frees the KV of every sequence

  // A new waiting sequence. Preconditions: tokens non-empty, slots >= 1; selecting (`select`
  // on, normalized): slots 1, tokens = the prompt. adopt >= 0: a block-manager sequence of this
  // manager holding the KV of tokens[0, length) (committed), which this sequence now owns (see
  // the top).
  SchedSequence& add(const SeqKey& key, std::vector<int32_t> tokens, int64_t max_tokens, int32_t slots,
                     const kvcache::KvNamespace& ns, const kvcache::KvSelectParams& select = {},
                     kvcache::SeqId adopt = -1);
  // Frees its KV (if running, or adopted and never admitted) and forgets it.
  void remove(SchedSeqId id);
  // Forgets a running sequence that is not loading, handing its block-manager sequence (every
  // block of its KV, the partly filled last one included) to the caller, who frees it.
  kvcache::SeqId release_kv(SchedSeqId id);
  // A running sequence with the same tokens sharing every block of `parent` (copy-on-write),
  // taking one of parent's slots. Preconditions: parent running, fully computed, slots > 1.
  SchedSequence& fork(SchedSequence& parent, const SeqKey& key);
  SchedSequence& get(SchedSeqId id);

  // Decides the next step (see the top). The plan stays valid until the next call.
  const StepPlan& schedule();

  int64_t num_running() const { return static_cast<int64_t>(running_.size()); }
  int64_t num_waiting() const { return static_cast<int64_t>(waiting_.size()); }
  int64_t num_loading() const;  // running sequences whose blocks load, and detached loads
  // Tier loads, probes or puts in flight: the owner keeps stepping (polling) rather than sleeping.
  bool tier_work_pending() const { return options_.tiers != nullptr && options_.tiers->has_pending_work(); }
  int64_t num_running_slots() const { return running_slots_; }
  bool empty() const { return seqs_.empty(); }
  const SchedulerOptions& options() const { return options_; }

 private:
  void preempt(SchedSequence& seq);
  // Swap preemption: puts seq's committed blocks into tier 0; false when it cannot (no host tier).
  bool swap_out(SchedSequence& seq);
  bool can_swap() const;
  // New blocks a step feeding n tokens of a running sequence takes (after StreamingLLM drops).
  int64_t blocks_needed(const SchedSequence& seq, int64_t n) const;
  bool try_admit(SchedSequence& seq, int64_t& token_budget, int64_t& reserved_blocks);
  // Admission onto seq.adopt. kWait: the rest does not fit now, others run (it keeps its KV);
  // kDropped: unusable, or too big even alone (adopt freed: admit the ordinary way).
  enum class Adoption { kAdmitted, kWait, kDropped };
  Adoption admit_adopted(SchedSequence& seq, int64_t& token_budget, int64_t& reserved_blocks);
  void enter_running(SchedSequence& seq);
  // The first chunk of a newly admitted sequence whose KV covers blocks_.length(seq.kv) tokens.
  void schedule_first(SchedSequence& seq, int64_t& token_budget, int64_t& reserved_blocks);
  // Windowed or selecting: no prefix cache, no tiers, no fork.
  bool uncached(const SchedSequence& seq) const { return options_.windows.on || seq.select.on(); }
  // The most tokens one step may feed seq from tokens[begin] on (windows, selection).
  int64_t max_rows(const SchedSequence& seq, int64_t begin, int64_t n) const;
  // The most KV tokens seq holds at once (0: no bound but its length).
  int64_t kv_cap(const SchedSequence& seq) const;
  // Tiers (scheduler_tiers.cpp).
  void poll_tiers();
  // After the pool hit: how many tokens to load from the tiers and from where; false while a
  // probe is outstanding (admission waits).
  bool plan_load(SchedSequence& seq, const kvcache::PrefixMatch& hit, std::vector<kvcache::LoadItem>& items,
                 int64_t& n_load_tokens);
  void start_load(SchedSequence& seq, int64_t cached, std::vector<kvcache::LoadItem>& items, int64_t n_load_tokens);
  void finish_load(SchedSequence& seq, const kvcache::LoadResult& result);
  SchedSequence* victim();  // the last running sequence that is not loading
  int64_t step_token_cap(int64_t num_decodes) const;  // tokens this step may take (latency budget)
  static void insert_ordered(std::vector<SchedSequence*>& list, SchedSequence* seq);
  static void erase_from(std::vector<SchedSequence*>& list, SchedSequence* seq);

  kvcache::BlockManager& blocks_;
  SchedulerOptions options_;
  std::unordered_map<SchedSeqId, SchedSequence> seqs_;  // node-based: pointers stay valid
  std::vector<SchedSequence*> running_;  // in scheduling order
  std::vector<SchedSequence*> waiting_;  // in scheduling order
  int64_t running_slots_ = 0;
  SchedSeqId next_id_ = 0;
  StepPlan plan_;
  struct Detached {                      // a removed sequence whose blocks are still loading
    kvcache::SeqId kv;
    kvcache::LoadId load;
  };
  std::vector<Detached> detached_;
  std::vector<kvcache::BlockHash> chain_scratch_;
  std::vector<kvcache::LoadItem> items_scratch_;
  std::vector<kvcache::BlockInfo> swap_scratch_;  // [blocks of one victim]
  std::vector<std::string_view> media_;   // [tiers] Tier::medium()
  std::array<int64_t, kvcache::kMaxTiers> seen_load_bytes_{}, seen_load_ns_{};  // fed to the cost model
  bool waiting_for_tier_ = false;         // the last try_admit waits for a probe
};

}  // namespace pagoda::engine
