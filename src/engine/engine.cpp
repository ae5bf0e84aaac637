#include "engine/engine.h"

#include <algorithm>

namespace pagoda::engine {

const char* finish_reason_name(FinishReason reason) {
  switch (reason) {
    case FinishReason::kLength: return "length";
    case FinishReason::kStop: return "stop";
    case FinishReason::kAborted: return "aborted";
  }
  return "?";
}

Result<std::unique_ptr<Engine>> Engine::create(std::shared_ptr<const model::LlamaModel> model, const EngineConfig& config,
                                               const Clock& clock, const Logger& logger) {
  CHECK(model != nullptr);
  const model::ModelConfig& mc = model->config();
  std::unique_ptr<Engine> e(new Engine());
  e->clock_ = &clock;
  e->logger_ = &logger;
  e->max_context_ = config.max_context > 0 ? config.max_context : mc.n_ctx_train;
  if (e->max_context_ <= 0 || e->max_context_ > (int64_t{1} << 22)) {
    return Status::error("bad context size " + std::to_string(e->max_context_));
  }
  if (config.max_batch_tokens <= 0) return Status::error("max batch tokens must be positive");
  e->max_batch_tokens_ = std::min(config.max_batch_tokens, e->max_context_);

  kvcache::KvLayout layout;
  layout.n_layer = mc.n_layer;
  layout.n_kv_head = mc.n_kv_head;
  layout.head_dim = mc.head_dim;
  layout.block_size = config.block_size;
  layout.dtype = config.kv_dtype;
  layout.layout = config.kv_layout;
  PAGODA_RETURN_IF_ERROR(layout.validate());
  int64_t budget = config.kv_cache_bytes;
  if (budget <= 0) {
    const int64_t blocks_per_context = (e->max_context_ + layout.block_size - 1) / layout.block_size;
    budget = std::max(blocks_per_context * layout.bytes_per_block(),
                      std::min<int64_t>(4 * blocks_per_context * layout.bytes_per_block(), int64_t{2} << 30)) +
             layout.stage_bytes();  // int4 only: fixed f32 staging of partial K blocks
  }
  PAGODA_ASSIGN_OR_RETURN(e->plan_, kvcache::plan_kv_pool(layout, budget));
  PAGODA_ASSIGN_OR_RETURN(kvcache::BlockPool pool, kvcache::BlockPool::create(layout, e->plan_.num_blocks));
  e->pool_ = std::make_unique<kvcache::BlockPool>(std::move(pool));
  e->blocks_ = std::make_unique<kvcache::BlockManager>(*e->pool_);
  for (int64_t l = 0; l < mc.n_layer; ++l) e->kv_views_.push_back(e->pool_->layer_view(l));
  logger.info(kvcache::describe_kv_pool(layout, e->plan_));

  const int threads = config.num_threads > 0 ? config.num_threads : ThreadPool::hardware_threads();
  e->pool_threads_ = std::make_unique<ThreadPool>(threads);
  e->model_ = std::move(model);
  e->forward_ = std::make_unique<model::ForwardPass>(*e->model_, *e->pool_threads_, e->max_batch_tokens_, e->max_context_);
  e->positions_.resize(e->max_batch_tokens_);
  e->slots_.resize(e->max_batch_tokens_);
  e->logit_rows_.resize(e->max_batch_tokens_);
  e->logits_.resize(e->max_batch_tokens_ * mc.n_vocab);
  return e;
}

Status Engine::check_fits(int64_t total_tokens) const {
  if (total_tokens > max_context_) {
    return Status::error("prompt + generation is " + std::to_string(total_tokens) + " tokens, more than the context of " +
                         std::to_string(max_context_) + " tokens");
  }
  if (total_tokens > plan_.token_capacity) {
    return Status::error("prompt + generation is " + std::to_string(total_tokens) + " tokens, more than the KV cache holds (" +
                         std::to_string(plan_.token_capacity) + " tokens; raise --kv-cache-mem)");
  }
  return Status::ok();
}

Status Engine::forward_chunk(kvcache::SeqId seq, std::span<const int32_t> tokens, int64_t first_pos, bool want_logits,
                             bool all_rows, float* logits_out) {
  const int64_t n = static_cast<int64_t>(tokens.size());
  CHECK(n > 0 && n <= max_batch_tokens_);
  if (!blocks_->append(seq, n, std::span<int64_t>(slots_.data(), n))) {
    return Status::error("out of KV cache blocks (" + std::to_string(pool_->num_free()) + " free)");
  }
  for (int64_t i = 0; i < n; ++i) positions_[i] = static_cast<int32_t>(first_pos + i);
  int64_t n_rows = 0;
  if (want_logits) {
    if (all_rows) {
      for (int64_t i = 0; i < n; ++i) logit_rows_[n_rows++] = i;
    } else {
      logit_rows_[n_rows++] = n - 1;
    }
  }
  const std::vector<int32_t>& table = blocks_->block_table(seq);
  kernels::SeqSpan span{0, n, table.data(), static_cast<int64_t>(table.size())};
  model::Batch batch;
  batch.tokens = tokens;
  batch.positions = std::span<const int32_t>(positions_.data(), n);
  batch.slot_mapping = std::span<const int64_t>(slots_.data(), n);
  batch.seqs = std::span<const kernels::SeqSpan>(&span, 1);
  batch.logit_rows = std::span<const int64_t>(logit_rows_.data(), n_rows);
  forward_->forward(batch, kv_views_, logits_out);
  return Status::ok();
}

Result<GenerateResult> Engine::generate(const GenerateRequest& request, const TokenCallback& on_token) {
  const int64_t n_prompt = static_cast<int64_t>(request.prompt.size());
  const int64_t n_vocab = model_->config().n_vocab;
  if (n_prompt == 0) return Status::error("empty prompt: at least one token (e.g. BOS) is needed");
  if (request.max_new_tokens < 0) return Status::error("max_new_tokens must be >= 0");
  for (int32_t id : request.prompt) {
    if (id < 0 || id >= n_vocab) return Status::error("prompt token id " + std::to_string(id) + " outside the vocabulary");
  }
  PAGODA_RETURN_IF_ERROR(request.sampling.validate());
  // The last generated token is returned, never fed back, so it needs no KV slot.
  PAGODA_RETURN_IF_ERROR(check_fits(n_prompt + std::max<int64_t>(0, request.max_new_tokens - 1)));

  GenerateResult result;
  result.stats.prompt_tokens = n_prompt;
  const int64_t t_start = clock_->now_ns();
  const kvcache::SeqId seq = blocks_->add_sequence(n_prompt + request.max_new_tokens);
  struct SeqGuard {  // frees the sequence's blocks on every path out
    kvcache::BlockManager& blocks;
    kvcache::SeqId seq;
    ~SeqGuard() { blocks.free_sequence(seq); }
  } guard{*blocks_, seq};

  float* logits = logits_.data();
  for (int64_t begin = 0; begin < n_prompt; begin += max_batch_tokens_) {
    const int64_t n = std::min(max_batch_tokens_, n_prompt - begin);
    const bool last = begin + n == n_prompt;
    PAGODA_RETURN_IF_ERROR(forward_chunk(seq, std::span<const int32_t>(request.prompt).subspan(begin, n), begin, last,
                                         false, logits));
  }
  const int64_t t_prefill = clock_->now_ns();
  result.stats.prefill_s = (t_prefill - t_start) * 1e-9;
  result.stats.kv_blocks_used = static_cast<int64_t>(blocks_->block_table(seq).size());
  if (request.max_new_tokens == 0) return result;

  Sampler sampler(request.sampling, n_vocab);
  std::vector<int32_t> history(request.prompt);
  history.reserve(n_prompt + request.max_new_tokens);
  int64_t t_first = 0;
  for (int64_t i = 0; i < request.max_new_tokens; ++i) {
    const int32_t token = sampler.sample(std::span<float>(logits, n_vocab), history);
    if (i == 0) {
      t_first = clock_->now_ns();
      result.stats.ttft_s = (t_first - t_start) * 1e-9;
    }
    result.tokens.push_back(token);
    history.push_back(token);
    if (on_token && !on_token(token)) {
      result.finish_reason = FinishReason::kAborted;
      break;
    }
    if (std::find(request.stop_token_ids.begin(), request.stop_token_ids.end(), token) != request.stop_token_ids.end()) {
      result.finish_reason = FinishReason::kStop;
      break;
    }
    if (i + 1 == request.max_new_tokens) break;
    PAGODA_RETURN_IF_ERROR(forward_chunk(seq, std::span<const int32_t>(&history.back(), 1),
                                         static_cast<int64_t>(history.size()) - 1, true, false, logits));
  }
  result.stats.generated_tokens = static_cast<int64_t>(result.tokens.size());
  result.stats.decode_s = (clock_->now_ns() - t_first) * 1e-9;
  result.stats.kv_blocks_used = static_cast<int64_t>(blocks_->block_table(seq).size());
  return result;
}

Result<std::vector<float>> Engine::score(std::span<const int32_t> tokens) {
  const int64_t n = static_cast<int64_t>(tokens.size());
  const int64_t n_vocab = model_->config().n_vocab;
  if (n == 0) return Status::error("nothing to score");
  for (int32_t id : tokens) {
    if (id < 0 || id >= n_vocab) return Status::error("token id " + std::to_string(id) + " outside the vocabulary");
  }
  PAGODA_RETURN_IF_ERROR(check_fits(n));
  const kvcache::SeqId seq = blocks_->add_sequence(n);
  struct SeqGuard {
    kvcache::BlockManager& blocks;
    kvcache::SeqId seq;
    ~SeqGuard() { blocks.free_sequence(seq); }
  } guard{*blocks_, seq};
  std::vector<float> out(n * n_vocab);
  for (int64_t begin = 0; begin < n; begin += max_batch_tokens_) {
    const int64_t len = std::min(max_batch_tokens_, n - begin);
    PAGODA_RETURN_IF_ERROR(forward_chunk(seq, tokens.subspan(begin, len), begin, true, true, out.data() + begin * n_vocab));
  }
  return out;
}

}  // namespace pagoda::engine
