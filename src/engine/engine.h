// Engine: a model, its paged KV cache and the step loop that turns prompts into tokens.
//
// Today it runs one request at a time (`generate`): the prompt is prefilled in chunks of up
// to max_batch_tokens rows (matrix-matrix), then tokens are decoded one per step
// (matrix-vector), each step writing its K/V through the block table's slot mapping.
// Continuous batching (many sequences per step) extends `step` without changing the model
// or the cache interfaces.
//
// Sequence states: waiting -> prefilling (chunks) -> decoding -> finished | aborted.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/clock.h"
#include "core/log.h"
#include "core/thread_pool.h"
#include "engine/sampler.h"
#include "kvcache/block_manager.h"
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
};

struct GenerateRequest {
  std::vector<int32_t> prompt;           // token ids, BOS included if wanted
  int64_t max_new_tokens = 128;
  SamplingParams sampling = SamplingParams::greedy();
  std::vector<int32_t> stop_token_ids;   // generation ends after emitting one of these
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
  double prefill_tps() const { return prefill_s > 0 ? prompt_tokens / prefill_s : 0; }
  double decode_tps() const { return decode_s > 0 ? (generated_tokens - 1) / decode_s : 0; }
};

struct GenerateResult {
  std::vector<int32_t> tokens;  // generated ids (the stop token included, if any)
  FinishReason finish_reason = FinishReason::kLength;
  GenerateStats stats;
};

class Engine {
 public:
  // on_token returns false to abort generation.
  using TokenCallback = std::function<bool(int32_t token)>;

  // The model may be shared by several engines (e.g. an f32-KV baseline beside a quantized one).
  static Result<std::unique_ptr<Engine>> create(std::shared_ptr<const model::LlamaModel> model,
                                                const EngineConfig& config, const Clock& clock,
                                                const Logger& logger);

  Result<GenerateResult> generate(const GenerateRequest& request, const TokenCallback& on_token = nullptr);

  // Logits after every position of `tokens`: [tokens.size(), n_vocab]. Uses the KV cache
  // like a prompt and frees it afterwards.
  Result<std::vector<float>> score(std::span<const int32_t> tokens);

  const model::LlamaModel& model() const { return *model_; }
  std::shared_ptr<const model::LlamaModel> shared_model() const { return model_; }
  const kvcache::KvLayout& kv_layout() const { return pool_->layout(); }
  const kvcache::KvPoolPlan& kv_plan() const { return plan_; }
  kvcache::BlockManager& block_manager() { return *blocks_; }
  int64_t max_context() const { return max_context_; }
  int num_threads() const { return pool_threads_->num_threads(); }

 private:
  Engine() = default;
  // Runs rows [begin, end) of `tokens` of sequence `seq` through the model; when want_logits,
  // logits_ receives the last row's logits (all rows' when all_rows).
  Status forward_chunk(kvcache::SeqId seq, std::span<const int32_t> tokens, int64_t first_pos,
                       bool want_logits, bool all_rows, float* logits_out);
  Status check_fits(int64_t total_tokens) const;

  std::shared_ptr<const model::LlamaModel> model_;
  const Clock* clock_ = nullptr;
  const Logger* logger_ = nullptr;
  int64_t max_context_ = 0;
  int64_t max_batch_tokens_ = 0;
  kvcache::KvPoolPlan plan_;
  std::unique_ptr<ThreadPool> pool_threads_;
  std::unique_ptr<kvcache::BlockPool> pool_;
  std::unique_ptr<kvcache::BlockManager> blocks_;
  std::unique_ptr<model::ForwardPass> forward_;
  std::vector<kernels::KvLayerView> kv_views_;  // [n_layer]
  // Step scratch, sized at creation.
  std::vector<int32_t> positions_;    // [max_batch_tokens]
  std::vector<int64_t> slots_;        // [max_batch_tokens]
  std::vector<int64_t> logit_rows_;   // [max_batch_tokens]
  std::vector<float> logits_;         // [max_batch_tokens, n_vocab]
};

}  // namespace pagoda::engine
