// Engine: a model, its paged KV cache and the step that turns tokens into logits.
//
// `step` is one forward pass over new tokens of several sequences at once (a ragged batch):
// each sequence's tokens are appended to its block table (slot mapping, copy-on-write copies),
// the model runs once over all rows, attention reads each sequence's blocks through its table,
// and the full blocks are committed to the prefix cache. Two drivers use it:
//   - `generate` / `generate_parallel` / `score` here: one request at a time. The longest cached
//     prefix of the prompt is adopted from the prefix cache (kvcache::BlockManager), the rest
//     is prefilled in chunks of up to max_batch_tokens rows, then tokens are decoded one per
//     step; generate_parallel forks the prompt's sequence into n samples that share its blocks
//     (copy-on-write) and decodes them together, one row each per step.
//   - ServingEngine (engine/serving.h): continuous batching of many requests; its Scheduler
//     (engine/scheduler.h) decides each step's sequences and chunk sizes, and it owns the
//     engine (and so the block manager) from then on.
// StreamingLLM windows and sliding-window models (engine_window.cpp) are for the first only.
//
// Sequence states: waiting -> prefilling (chunks) -> decoding -> finished | aborted, and under
// ServingEngine running -> preempted (KV freed, recomputed later) -> waiting.
#pragma once

#include <functional>
#include <utility>
#include <optional>
#include <string>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/clock.h"
#include "core/log.h"
#include "core/thread_pool.h"
#include "engine/load_cost.h"
#include "engine/sampler.h"
#include "kvcache/block_manager.h"
#include "kvcache/tier_stack.h"
#include "model/llama_model.h"

namespace pagoda::engine {

struct EngineConfig {
  int num_threads = 0;                   // 0: all cores
  int64_t kv_cache_bytes = 0;            // 0: enough for max_context tokens, capped at 1 GiB
  int64_t block_size = 16;               // tokens per KV block
  kernels::KvDType kv_dtype = kernels::KvDType::kF32;            // KV element format (kernels/kv_format.h)
  kernels::KvLayoutKind kv_layout = kernels::KvLayoutKind::kND;  // kNZ: unquantized, block_size % 16 == 0
  int64_t max_batch_tokens = 512;        // rows per forward pass (prefill chunk)
  int64_t max_context = 0;               // 0: the model's training context
  bool enable_prefix_caching = true;     // reuse cached KV of earlier prompts' full blocks
  kvcache::EvictionPolicyKind eviction = kvcache::EvictionPolicyKind::kLru;
  kvcache::BlockHashScheme kv_hash = kvcache::BlockHashScheme::kXxh64;  // --kv-hash (block_hash.h)
  // StreamingLLM (--kv-window W --kv-sinks S): each sequence keeps its first S tokens (the
  // attention sinks) and its last W tokens in the cache; before a step would exceed S + W, the
  // oldest non-sink block is dropped and the K of every later block re-rotated by -block_size
  // positions, so positions are cache positions (as in the paper) and generation runs past the
  // pool's size and the model's context at constant memory. S and W are rounded up to whole
  // blocks, W to at least 2 blocks; S + W <= max_context. Not with int4 KV (its K cannot be
  // re-rotated), not with parallel samples, never prefix-cached. 0: off.
  int64_t kv_window = 0;
  int64_t kv_sinks = 0;
  // Models with a sliding window (GGUF attention.sliding_window): after each step, blocks no
  // later row can attend to are freed (holes in the table); such sequences are never
  // prefix-cached nor forked. false: keep them (same results, more memory; for tests).
  bool free_out_of_window = true;
  // Attention-score KV selection (--kv-select h2o|snapkv --kv-budget N [--kv-recent R]
  // [--kv-observe W]; kvcache/kv_select.h): the default of every request (a request may set
  // its own). Such sequences are never prefix-cached nor forked; not with windows, MLA or int4.
  kvcache::KvSelectParams kv_select;
  // --batched-bf16: forward passes of 16 or more rows on F16/BF16 weights multiply in bf16
  // (kernels/matmul.h), so batched decode steps run faster than on the f32 decode kernels; a
  // sequence's logits then depend, at bf16's 2^-8, on how many others share its step. Whoever
  // loads the model rounds its F16 weights to BF16 first (LlamaModel::round_f16_weights_to_bf16,
  // tools/ does), so the GEMM reads rows without converting them. Its KV is another format key
  // (never shared with instances without it). Off: a decoding sequence's numbers are those of
  // decoding it alone.
  // Where the bf16 GEMM does not run (kernels::batched_bf16_runs: AVX2, AMX, no AVX512-BF16) it
  // is ignored with a warning: nothing would go faster, and rounded weights would lose accuracy.
  bool batched_bf16 = false;
  // `--matmul-precision f32`: F16/BF16 weights multiply in f32 on every path
  // (kernels::Matmul::set_f32_precision), never in bf16; prefill is then slower where the
  // bf16 GEMM or AMX would run. Default (`auto`): the fastest arithmetic the ISA has, stated in
  // the start-up log. Not with batched_bf16 (refused). Its KV is another format key.
  bool f32_matmul = false;
  // MLA prefill chunks (`--mla-prefill`, model::ForwardPass::set_mla_prefill): kAuto takes the
  // expanded form where it costs fewer multiply-adds; the others force a form (A/B, tests).
  model::MlaPrefill mla_prefill = model::MlaPrefill::kAuto;
  // The kernels' instruction set (kernels/matmul.h, `--isa`): by default the best this CPU runs; a
  // lower one runs that ISA's paths (one host tests them all). One the CPU lacks is refused.
  kernels::Isa isa = kernels::detect_isa();
};

// --batched-bf16 as a loader applies it: where the bf16 GEMM runs on config.isa, rounds the
// model's F16 weights to BF16 (LlamaModel::round_f16_weights_to_bf16); elsewhere warns and
// turns config.batched_bf16 off, leaving the weights as they are.
Status prepare_batched_bf16(model::LlamaModel& model, EngineConfig& config, const Logger& logger);

// The start-up log's line on the arithmetic of the weight matmuls on `isa` (kernels/matmul.h).
std::string describe_matmul_precision(kernels::Isa isa, bool f32_matmul, bool batched_bf16);

struct GenerateRequest {
  std::vector<int32_t> prompt;           // token ids, BOS included if wanted
  int64_t max_new_tokens = 128;
  SamplingParams sampling = SamplingParams::greedy();
  std::vector<int32_t> stop_token_ids;   // generation ends after emitting one of these
  std::string cache_salt;                // prefix-cache entries are shared only within one salt
  int32_t priority = 0;                  // eviction priority of its cached blocks (higher kept longer)
  bool dump_kv = false;                  // fill GenerateResult::kv_dump before releasing the blocks
  std::optional<kvcache::KvSelectParams> kv_select;  // nullopt: EngineConfig::kv_select
};

enum class FinishReason { kLength, kStop, kAborted };
const char* finish_reason_name(FinishReason reason);

struct GenerateStats {
  int64_t prompt_tokens = 0;
  int64_t generated_tokens = 0;
  double ttft_s = 0;      // start -> first generated token
  double prefill_s = 0;   // prompt forward passes
  double decode_s = 0;    // after the first token
  int64_t kv_blocks_used = 0;
  int64_t cached_tokens = 0;  // prompt tokens whose KV came from the prefix cache (pool + tiers)
  int64_t loaded_tokens = 0;  // of which loaded from lower tiers
  double prefill_tps() const { return prefill_s > 0 ? prompt_tokens / prefill_s : 0; }
  double decode_tps() const { return decode_s > 0 && generated_tokens > 1 ? (generated_tokens - 1) / decode_s : 0; }
};

// What the KV cache holds for one sequence (the first place to look when output goes wrong).
struct KvBlockDump {
  int32_t block_id = -1;
  int32_t ref_count = 0;
  std::string state;          // "in use", "cached", "free", "released" (a window hole, block_id -1)
  uint64_t hash = 0;          // chained block hash, 0 if not registered in the prefix index
  std::string tiers;          // where its KV is: "pool", plus each lower tier holding a copy ("pool+host+disk")
  std::string loaded_from;    // the tier it was loaded from at admission ("" when computed or hit in the pool)
  std::vector<float> k_head0; // layer 0, kv head 0, the block's first slot: first values of K
};
struct SequenceDump {
  int64_t length = 0;         // cache position (rows stored)
  std::string kv_select;      // "" or the selection it ran ("h2o budget 64 recent 32"): not prefix-cached
  int64_t next_position = 0;  // logical position of the next token (> length after evictions)
  int64_t num_evicted = 0;    // rows dropped by selection
  std::vector<KvBlockDump> blocks;
};
std::string format_kv_dump(const SequenceDump& dump);

struct GenerateResult {
  std::vector<int32_t> tokens;  // generated ids (the stop token included, if any)
  FinishReason finish_reason = FinishReason::kLength;
  GenerateStats stats;
  std::optional<SequenceDump> kv_dump;  // when the request asked for it
};

struct ParallelResult {
  std::vector<GenerateResult> samples;  // sample i drew with seed + i
  int64_t kv_blocks_shared = 0;         // distinct blocks the samples held at the end
  int64_t kv_blocks_independent = 0;    // blocks n independent runs would have held
};

// Frees a sequence's blocks on every path out of a scope.
class SequenceGuard {
 public:
  SequenceGuard(kvcache::BlockManager& blocks, kvcache::SeqId seq) : blocks_(&blocks), seq_(seq) {}
  SequenceGuard(SequenceGuard&& other) noexcept : blocks_(std::exchange(other.blocks_, nullptr)), seq_(other.seq_) {}
  SequenceGuard(const SequenceGuard&) = delete;
  SequenceGuard& operator=(const SequenceGuard&) = delete;
  SequenceGuard& operator=(SequenceGuard&&) = delete;
  ~SequenceGuard() {
    if (blocks_ != nullptr) blocks_->free_sequence(seq_);
  }
  kvcache::SeqId seq() const { return seq_; }

 private:
  kvcache::BlockManager* blocks_;
  kvcache::SeqId seq_;
};

// Hash of a model file's identity (metadata, tensor headers, edge bytes of every tensor).
uint64_t model_fingerprint(const model::GgufFile& file);

class Engine {
 public:
  // on_token returns false to abort generation.
  using TokenCallback = std::function<bool(int32_t token)>;

  // The model may be shared by several engines (e.g. an f32-KV baseline beside a quantized one).
  static Result<std::unique_ptr<Engine>> create(std::shared_ptr<const model::LlamaModel> model,
                                                const EngineConfig& config, const Clock& clock,
                                                const Logger& logger);

  ~Engine();

  // Puts `tiers` (fastest first) below the pool: evicted blocks are written down (or every
  // committed block, write-through) and admissions load prefixes from them (kvcache/tier_stack.h).
  // Once, before any request. Fails with more than kvcache::kMaxTiers or a windowed engine.
  // write_through[i]: tier i also gets every committed block at once (empty: none does).
  Status attach_tiers(std::vector<std::unique_ptr<kvcache::Tier>> tiers, kvcache::OffloadMode offload,
                      LoadCostModel::Mode load_mode = LoadCostModel::Mode::kAuto,
                      const std::vector<bool>& write_through = {});
  kvcache::TierStack* tiers() { return tiers_.get(); }
  const kvcache::TierStack* tiers() const { return tiers_.get(); }
  // Times a short prefill (kCalibrationTokens rows, after one untimed run) on a scratch sequence
  // that is never cached, and feeds it to the load-cost model, so its first decision uses this
  // machine's prefill speed (engine/load_cost.h). Needs tiers attached; once, before requests.
  // Returns the tokens/s measured (0 when the clock did not move, e.g. a ManualClock).
  Result<double> calibrate_load_cost();
  static constexpr int64_t kCalibrationTokens = 32;
  LoadCostModel* load_cost() { return load_cost_.get(); }
  const LoadCostModel* load_cost() const { return load_cost_.get(); }
  // Where pool block `block` got its KV: loaded from tier `tier` while it was chain block `hash`
  // (note_loaded, by whoever finished the load); loaded_from answers that tier, or -1 when the
  // block was computed here or has been reused since (its hash differs). Needs tiers attached.
  void note_loaded(int32_t block, int tier, uint64_t hash);
  int loaded_from(int32_t block, uint64_t hash) const;
  // Evicts every cached block of the pool (written down to the tiers, write-back): benchmarks.
  int64_t evict_cached_blocks() { return blocks_->evict_all_cached(); }

  Result<GenerateResult> generate(const GenerateRequest& request, const TokenCallback& on_token = nullptr);

  // n samples of one prompt, forked after the prefill so they share its blocks. Sample i uses
  // seed + i, so it equals generate() with that seed. on_token(i, token) may abort all.
  using SampleCallback = std::function<bool(int sample, int32_t token)>;
  Result<ParallelResult> generate_parallel(const GenerateRequest& request, int n,
                                           const SampleCallback& on_token = nullptr);

  // Logits after every position of `tokens`: [tokens.size(), n_vocab]. Uses the KV cache
  // like a prompt and frees it afterwards.
  Result<std::vector<float>> score(std::span<const int32_t> tokens);
  // The same with attention-score selection: tokens [0, n_prompt) are a prompt (SnapKV selects
  // once it is computed; H2O evicts from the start), the rest are fed in chunks of at most
  // kv_select_max_chunk rows, as decoding would see them. `select` off: score(tokens).
  Result<std::vector<float>> score(std::span<const int32_t> tokens, const kvcache::KvSelectParams& select,
                                   int64_t n_prompt);
  // Checks (and normalizes) a request's selection against this engine.
  Status check_kv_select(kvcache::KvSelectParams& select) const;
  // Grows the attention-score buffer so that steps of up to n_seqs sequences selecting with
  // `select` (normalized) take no allocation: H2O's stored length never exceeds its budget.
  // (A SnapKV prompt's observation-window chunks may still grow it once, to that prompt's
  // length, and allocate the sequence's window sums once.) Not thread-safe: the step thread.
  void reserve_kv_select(const kvcache::KvSelectParams& select, int64_t n_seqs);
  size_t kv_score_capacity() const { return scores_.size(); }  // for tests: unchanged by steps

  // One forward pass over the new tokens of several sequences (a ragged batch; the serving
  // loop's step): appends them (slots, copy-on-write copies), runs the model, commits the
  // blocks. logits_out gets the last row of each sequence whose `logits` is set
  // ([rows, n_vocab], in order), or every row of every sequence when all_rows, or nothing when
  // null. Precondition: at most max_batch_tokens() tokens. When the blocks do not fit
  // (the sum of BlockManager::plan over the sequences), returns kUnavailable changing nothing.
  struct StepSeq {
    kvcache::SeqId seq;
    std::span<const int32_t> tokens;  // appended at the sequence's current length
    bool logits = true;               // wants its last row's logits
  };
  Status step(std::span<const StepSeq> seqs, bool all_rows, float* logits_out);

  const model::LlamaModel& model() const { return *model_; }
  // Mixture of experts: [n_layer, n_expert] tokens routed to each expert so far (ForwardPass::
  // expert_tokens); empty for a dense model. The thread that steps reads it.
  std::span<const int64_t> expert_tokens() const { return forward_->expert_tokens(); }
  std::shared_ptr<const model::LlamaModel> shared_model() const { return model_; }
  const kvcache::KvLayout& kv_layout() const { return pool_->layout(); }
  const kvcache::KvPoolPlan& kv_plan() const { return plan_; }
  kvcache::BlockManager& block_manager() { return *blocks_; }
  const kvcache::KvNamespace& kv_namespace(const std::string& cache_salt);  // for tests
  // The namespace fields every cached block of this engine carries (besides the tenant's salt):
  // what a router needs to hash a prompt's blocks exactly as this engine does.
  uint64_t model_fingerprint() const { return model_fingerprint_; }
  uint64_t kv_format_key() const { return kv_format_key_; }
  int64_t max_context() const { return max_context_; }
  int64_t max_batch_tokens() const { return max_batch_tokens_; }
  const EngineConfig& config() const { return config_; }
  const Clock& clock() const { return *clock_; }
  // Selection a request runs under (its own, else the engine's default), normalized.
  kvcache::KvSelectParams kv_select_for(const GenerateRequest& request) const {
    return request.kv_select.has_value() ? *request.kv_select : config_.kv_select;
  }
  const Logger& logger() const { return *logger_; }
  // Sequences drop or release blocks (StreamingLLM, sliding-window models).
  bool windowed() const { return windowed_seqs(); }
  // For a scheduler of windowed sequences (SchedulerOptions::Windows): StreamingLLM's sinks and
  // window in tokens (0: not streaming), the most KV tokens one sequence holds at once (0: no
  // bound but its length) and the most rows of one prefill chunk.
  int64_t stream_sinks() const { return kv_sinks_; }
  int64_t stream_window() const { return kv_window_; }
  int64_t kv_token_cap() const { return windowed_seqs() ? kv_tokens_needed(int64_t{1} << 40) : 0; }
  int64_t max_prefill_chunk() const { return prefill_chunk(); }
  int num_threads() const { return pool_threads_->num_threads(); }

 private:
  Engine() = default;
  Status check_fits(int64_t total_tokens) const;
  Status validate_request(const GenerateRequest& request) const;
  // Adopts the cached prefix (if enabled) and prefills the rest; logits_out gets the last row.
  Result<kvcache::SeqId> admit_and_prefill(const GenerateRequest& request, GenerateStats& stats, float* logits_out);
  SequenceDump dump_sequence(kvcache::SeqId seq);
  // Loads the whole blocks after the pool hit that the tiers hold (generate's blocking path:
  // polls until the load is in). Returns the tokens loaded.
  int64_t load_from_tiers(kvcache::SeqId seq, std::span<const int32_t> prompt, const kvcache::KvNamespace& ns);
  // Windows (engine_window.cpp). Sequences are uncacheable when either mode is on.
  bool streaming() const { return kv_window_ > 0; }
  bool frees_window_blocks() const { return !streaming() && model_window_ > 0 && config_.free_out_of_window; }
  bool windowed_seqs() const { return streaming() || frees_window_blocks(); }
  kvcache::SequenceOptions sequence_options(const kvcache::KvNamespace& ns, int32_t priority,
                                            const kvcache::KvSelectParams& select = {}, int64_t n_prompt = 0) const;
  // Selection (engine_select.cpp). Before appending n_new rows: SnapKV's selection once its
  // prompt is in, then evicting and compacting down to budget - n_new rows.
  void select_before_append(kvcache::SeqId seq, int64_t n_new);
  // Sets up this step's attention-score output (observe_from_, scores_); false when no
  // sequence of the step is observed. After the forward pass, collect_scores adds them in.
  bool prepare_scores(std::span<const StepSeq> seqs);
  void collect_scores(std::span<const StepSeq> seqs);
  // Rows per prefill chunk of a sequence (its selection may lower prefill_chunk()).
  int64_t chunk_for(const kvcache::KvSelectParams& select) const;
  // Rows per prefill chunk (streaming: at most kv_window - block_size, so one chunk always fits).
  int64_t prefill_chunk() const;
  // StreamingLLM: drops blocks after the sinks (re-rotating later K) until n_new more tokens fit.
  void make_room(kvcache::SeqId seq, int64_t n_new);
  // Sliding-window model: frees blocks wholly before the next row's window.
  void release_out_of_window(kvcache::SeqId seq);
  // KV tokens a request of total_tokens needs at once (less than total when windowed).
  int64_t kv_tokens_needed(int64_t total_tokens) const;

  std::shared_ptr<const model::LlamaModel> model_;
  const Clock* clock_ = nullptr;
  const Logger* logger_ = nullptr;
  int64_t max_context_ = 0;
  int64_t max_batch_tokens_ = 0;
  int64_t kv_window_ = 0;     // StreamingLLM window, whole blocks (0: off)
  int64_t kv_sinks_ = 0;      // StreamingLLM sinks, whole blocks
  int64_t model_window_ = 0;  // the model's sliding window (0: none)
  kvcache::KvPoolPlan plan_;
  std::unique_ptr<ThreadPool> pool_threads_;
  std::unique_ptr<kvcache::BlockPool> pool_;
  std::unique_ptr<kvcache::BlockManager> blocks_;
  std::unique_ptr<model::ForwardPass> forward_;
  std::unique_ptr<kvcache::TierStack> tiers_;   // below the pool (null: none); listens to blocks_
  std::unique_ptr<LoadCostModel> load_cost_;
  struct LoadedFrom {
    int8_t tier = -1;                           // -1: not loaded
    uint64_t hash = 0;                          // the block it was then (a reused block differs)
  };
  std::vector<LoadedFrom> loaded_from_;         // [num_blocks] where a block's KV was loaded from
  EngineConfig config_;
  uint64_t model_fingerprint_ = 0;
  uint64_t kv_format_key_ = 0;
  kvcache::KvNamespace ns_scratch_;
  std::vector<kernels::KvLayerView> kv_views_;  // [n_layer]
  // Step scratch, sized at creation.
  std::vector<int32_t> tokens_;       // [max_batch_tokens]
  std::vector<int32_t> positions_;    // [max_batch_tokens] cache positions (attention's causal order)
  std::vector<int32_t> rope_positions_;  // [max_batch_tokens] logical positions (differ after selection)
  std::vector<int32_t> observe_from_;    // [max_batch_tokens] per step sequence (kernels::AttentionScores)
  std::vector<float> scores_;            // [n_seqs, n_layer, n_kv_head, score_stride_]: grows, then stays
  int64_t score_stride_ = 0;
  std::vector<int64_t> victims_;         // rows one eviction drops
  std::vector<kernels::SeqSpan> spans_;          // [max_batch_tokens]
  std::vector<kvcache::BlockCopy> copies_;      // copy-on-write copies of one step
  std::vector<int64_t> slots_;        // [max_batch_tokens]
  std::vector<int64_t> logit_rows_;   // [max_batch_tokens]
  std::vector<float> logits_;         // [max_batch_tokens, n_vocab]
};

}  // namespace pagoda::engine
