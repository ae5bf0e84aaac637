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

uint64_t model_fingerprint(const model::GgufFile& file) {
  // Metadata, tensor headers and the first and last bytes of every tensor: two different
  // models (or quantizations) never share prefix-cache entries.
  uint64_t h = 0x9a60da;
  for (const auto& [key, value] : file.metadata()) {
    h = kvcache::hash_string(key + "=" + value.to_display_string(), h);
  }
  for (const model::GgufTensorInfo& t : file.tensors()) {
    h = kvcache::hash_string(t.name + ":" + std::to_string(t.ggml_type) + ":" + std::to_string(t.bytes), h);
    const uint8_t* data = file.tensor_data(t);
    if (data == nullptr || t.bytes == 0) continue;
    const size_t edge = std::min<size_t>(256, t.bytes);
    h = kvcache::xxhash64(data, edge, h);
    h = kvcache::xxhash64(data + t.bytes - edge, edge, h);
  }
  return h;
}

namespace {

std::string batched_bf16_ignored(kernels::Isa isa) {
  return std::string("--batched-bf16 ignored: the bf16 GEMM runs only on avx512 kernels with AVX512-BF16 (these are ") +
         kernels::isa_name(isa) + " kernels on a CPU whose best is " + kernels::isa_name(kernels::detect_isa()) +
         "); weights stay as they are and batched steps keep f32 arithmetic";
}

}  // namespace

std::string describe_matmul_precision(kernels::Isa isa, bool f32_matmul, bool batched_bf16) {
  std::string half;  // F16/BF16 weights
  if (f32_matmul) {
    half = "f32 (--matmul-precision f32)";
  } else if (isa == kernels::Isa::kAmx) {
    half = "prefill on AMX bf16 tiles, hi + lo parts (within 2^-16 of f32), decode and batched steps f32";
  } else if (kernels::batched_bf16_runs(isa)) {
    half = std::string("prefill in bf16 (AVX512-BF16, within 2^-7 of f32; --matmul-precision f32 to keep f32), ") +
           (batched_bf16 ? "batched steps in bf16 (--batched-bf16)" : "decode and batched steps f32");
  } else {
    half = "f32";
  }
  // Quantized weights: decode kernels on every ISA; prefill through the int8 GEMM on AVX2 and
  // AVX-512, AMX bf16 tiles on AMX, dequantize + sgemm on scalar (kernels::Matmul::path).
  std::string quantized = "int8 dot products with x quantized to 8 bits";
  if (isa == kernels::Isa::kScalar) {
    quantized = "decode and batched steps " + quantized + ", prefill dequantized to f32 (sgemm)";
  } else if (isa == kernels::Isa::kAmx) {
    quantized = "decode and batched steps " + quantized + ", prefill dequantized onto AMX bf16 tiles (hi + lo)";
  }
  return "f16/bf16 weights " + half + "; quantized weights " + quantized + " (" + kernels::isa_name(isa) + " kernels)";
}

Status prepare_batched_bf16(model::LlamaModel& model, EngineConfig& config, const Logger& logger) {
  if (!config.batched_bf16) return Status::ok();
  if (config.f32_matmul) {
    return Status::invalid_argument("--batched-bf16 multiplies batched steps in bf16; --matmul-precision f32 keeps "
                                    "f32 arithmetic: choose one");
  }
  if (!kernels::batched_bf16_runs(config.isa)) {
    logger.warn(batched_bf16_ignored(config.isa));
    config.batched_bf16 = false;
    return Status::ok();
  }
  return model.round_f16_weights_to_bf16();
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
  if (config.isa > kernels::detect_isa()) {
    return Status::invalid_argument(std::string("--isa ") + kernels::isa_name(config.isa) + ": this CPU runs at most " +
                                    kernels::isa_name(kernels::detect_isa()));
  }
  if (config.f32_matmul && config.batched_bf16) {
    return Status::invalid_argument("--batched-bf16 multiplies batched steps in bf16; --matmul-precision f32 keeps "
                                    "f32 arithmetic: choose one");
  }
  const bool batched_bf16 = config.batched_bf16 && kernels::batched_bf16_runs(config.isa);
  if (config.batched_bf16 && !batched_bf16) logger.warn(batched_bf16_ignored(config.isa));
  e->max_batch_tokens_ = std::min(config.max_batch_tokens, e->max_context_);

  kvcache::KvLayout layout;
  layout.n_layer = mc.n_kv_layers();  // CLA: only layers that own K/V have blocks
  layout.n_kv_head = mc.kv_cache_heads();  // MLA: one latent "head" of kv_lora_rank + rope dim, K only
  layout.head_dim = mc.kv_cache_head_dim();
  layout.k_only = mc.is_mla();
  layout.block_size = config.block_size;
  layout.dtype = config.kv_dtype;
  layout.layout = config.kv_layout;
  PAGODA_RETURN_IF_ERROR(layout.validate());
  if (config.kv_window < 0 || config.kv_sinks < 0) return Status::error("--kv-window and --kv-sinks must be >= 0");
  if (config.kv_window == 0 && config.kv_sinks > 0) return Status::error("--kv-sinks needs --kv-window");
  if (config.kv_window > 0) {
    if (mc.is_mla()) {
      return Status::error("--kv-window re-rotates cached keys, which an MLA model's latent cache does not "
                           "support yet; serve " + mc.arch_name + " without --kv-window");
    }
    if (layout.dtype == kernels::KvDType::kInt4) {
      return Status::error("--kv-window re-rotates cached K, which int4 KV cannot do (per-block K scales); "
                           "use --kv-dtype f32, f16, bf16, int8 or fp8");
    }
    const int64_t B = layout.block_size;
    e->kv_sinks_ = (config.kv_sinks + B - 1) / B * B;
    e->kv_window_ = std::max((config.kv_window + B - 1) / B * B, 2 * B);
    if (e->kv_sinks_ + e->kv_window_ > e->max_context_) {
      return Status::error("--kv-sinks + --kv-window (" + std::to_string(e->kv_sinks_ + e->kv_window_) +
                           " tokens, rounded to blocks) exceed the context of " + std::to_string(e->max_context_));
    }
  }
  e->model_window_ = mc.sliding_window;
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
  kvcache::BlockManagerOptions manager_options;
  manager_options.eviction = config.eviction;
  manager_options.hash_fn = kvcache::block_hash_fn(config.kv_hash);
  e->blocks_ = std::make_unique<kvcache::BlockManager>(*e->pool_, manager_options);
  e->config_ = config;
  e->config_.batched_bf16 = batched_bf16;
  e->model_fingerprint_ = engine::model_fingerprint(model->file());
  e->kv_format_key_ = kvcache::hash_string(std::string(kernels::kv_dtype_name(layout.dtype)) + "/" +
                                           std::string(kernels::kv_layout_name(layout.layout)) + "/" +
                                           std::to_string(layout.block_size) +
                                           (batched_bf16 ? "/batched-bf16" : "") +
                                           (config.f32_matmul ? "/f32-matmul" : ""));  // other numbers, other KV
  for (int64_t l = 0; l < mc.n_layer; ++l) {
    e->kv_views_.push_back(e->pool_->layer_view(mc.kv_cache_layer.empty() ? l : mc.kv_cache_layer[l]));
  }
  logger.info(kvcache::describe_kv_pool(layout, e->plan_));
  if (config.kv_select.on()) {
    e->model_ = model;  // check_kv_select reads the model
    PAGODA_RETURN_IF_ERROR(e->check_kv_select(e->config_.kv_select));
  }

  const int threads = config.num_threads > 0 ? config.num_threads : ThreadPool::hardware_threads();
  e->pool_threads_ = std::make_unique<ThreadPool>(threads);
  e->model_ = std::move(model);
  e->forward_ = std::make_unique<model::ForwardPass>(*e->model_, *e->pool_threads_, e->max_batch_tokens_, e->max_context_,
                                                     config.isa);
  e->forward_->set_batched_bf16(batched_bf16);
  e->forward_->set_f32_precision(config.f32_matmul);
  e->forward_->set_mla_prefill(config.mla_prefill);
  logger.info(std::string("matmul precision: ") + describe_matmul_precision(config.isa, config.f32_matmul, batched_bf16));
  logger.debug(std::string("kernels: ") + kernels::isa_name(config.isa) + " (this CPU: " +
               kernels::isa_name(kernels::detect_isa()) + ")");
  e->tokens_.resize(e->max_batch_tokens_);
  e->positions_.resize(e->max_batch_tokens_);
  e->rope_positions_.resize(e->max_batch_tokens_);
  e->observe_from_.resize(e->max_batch_tokens_);
  e->spans_.resize(e->max_batch_tokens_);
  e->slots_.resize(e->max_batch_tokens_);
  e->logit_rows_.resize(e->max_batch_tokens_);
  e->logits_.resize(e->max_batch_tokens_ * mc.n_vocab);
  return e;
}

Engine::~Engine() {
  if (tiers_ != nullptr) blocks_->remove_listener(tiers_.get());
}

Status Engine::attach_tiers(std::vector<std::unique_ptr<kvcache::Tier>> tiers, kvcache::OffloadMode offload,
                            LoadCostModel::Mode load_mode, const std::vector<bool>& write_through) {
  if (tiers_ != nullptr) return Status::invalid_argument("tiers are attached already");
  if (tiers.empty()) return Status::ok();
  if (static_cast<int>(tiers.size()) > kvcache::kMaxTiers) {
    return Status::invalid_argument("at most " + std::to_string(kvcache::kMaxTiers) + " KV tiers");
  }
  if (windowed_seqs()) return Status::invalid_argument("KV tiers need prefix caching; windowed KV is never cached");
  if (!config_.enable_prefix_caching) return Status::invalid_argument("KV tiers need prefix caching (it is off)");
  tiers_ = std::make_unique<kvcache::TierStack>(*pool_, offload, *clock_, *logger_);
  for (size_t i = 0; i < tiers.size(); ++i) {
    tiers_->add_tier(std::move(tiers[i]), i < write_through.size() && write_through[i]);
  }
  load_cost_ = std::make_unique<LoadCostModel>(load_mode);
  load_cost_->set_logger(logger_);
  for (int t = 0; t < tiers_->num_tiers(); ++t) {  // the tiers' own start-up probes, block-sized
    kvcache::Tier& tier = tiers_->tier(t);
    const kvcache::TransferSample s = tier.take_transfer_sample();
    if (s.bytes <= 0 || s.ns <= 0) continue;
    load_cost_->observe_load(t, tier.medium(), s.bytes, s.ns);
    logger_->info("kv tier " + std::string(tier.name()) + ": " +
                  std::to_string(static_cast<int64_t>(static_cast<double>(s.bytes) * 1e3 / static_cast<double>(s.ns))) +
                  " MB/s in its start-up probe (" + kvcache::format_bytes(s.bytes) + ")");
  }
  loaded_from_.assign(static_cast<size_t>(pool_->num_blocks()), LoadedFrom{});
  blocks_->add_listener(tiers_.get());
  return Status::ok();
}

Status Engine::check_fits(int64_t total_tokens) const {
  if (!streaming() && total_tokens > max_context_) {
    return Status::error("prompt + generation is " + std::to_string(total_tokens) + " tokens, more than the context of " +
                         std::to_string(max_context_) + " tokens");
  }
  if (kv_tokens_needed(total_tokens) > plan_.token_capacity) {
    return Status::error("prompt + generation needs " + std::to_string(kv_tokens_needed(total_tokens)) +
                         " KV tokens, more than the KV cache holds (" +
                         std::to_string(plan_.token_capacity) + " tokens; raise --kv-cache-mem)");
  }
  return Status::ok();
}

Result<std::vector<float>> Engine::score(std::span<const int32_t> tokens) {
  const int64_t n = static_cast<int64_t>(tokens.size());
  const int64_t n_vocab = model_->config().n_vocab;
  if (n == 0) return Status::error("nothing to score");
  for (int32_t id : tokens) {
    if (id < 0 || id >= n_vocab) return Status::error("token id " + std::to_string(id) + " outside the vocabulary");
  }
  PAGODA_RETURN_IF_ERROR(check_fits(n));
  SequenceGuard guard(*blocks_, blocks_->add_sequence(n, sequence_options(kv_namespace(""), 0)));
  std::vector<float> out(n * n_vocab);
  for (int64_t begin = 0; begin < n; begin += prefill_chunk()) {
    const int64_t len = std::min(prefill_chunk(), n - begin);
    const StepSeq chunk{guard.seq(), tokens.subspan(begin, len)};
    PAGODA_RETURN_IF_ERROR(step(std::span<const StepSeq>(&chunk, 1), true, out.data() + begin * n_vocab));
  }
  return out;
}

const kvcache::KvNamespace& Engine::kv_namespace(const std::string& cache_salt) {
  ns_scratch_.model_fingerprint = model_fingerprint_;
  ns_scratch_.kv_format = kv_format_key_;
  ns_scratch_.cache_salt = kvcache::cache_salt_key(cache_salt);
  return ns_scratch_;
}

Status Engine::step(std::span<const StepSeq> seqs, bool all_rows, float* logits_out) {
  int64_t n = 0;
  for (const StepSeq& s : seqs) n += static_cast<int64_t>(s.tokens.size());
  CHECK(n > 0 && n <= max_batch_tokens_) << "step of " << n << " rows, max " << max_batch_tokens_;
  if (!streaming()) {  // (streaming steps free blocks first in make_room)
    for (const StepSeq& s : seqs) {
      if (blocks_->select_state(s.seq) != nullptr) select_before_append(s.seq, static_cast<int64_t>(s.tokens.size()));
    }
    int64_t need = 0;
    for (const StepSeq& s : seqs) need += blocks_->plan(s.seq, static_cast<int64_t>(s.tokens.size())).num_new_blocks;
    if (need > blocks_->num_available_blocks()) {
      return Status::unavailable("out of KV cache blocks (" + std::to_string(need) + " needed, " +
                                 std::to_string(blocks_->num_available_blocks()) + " available; raise --kv-cache-mem)");
    }
  }
  bool selecting = false;  // rope positions differ from cache positions
  copies_.clear();
  int64_t row = 0, n_logit_rows = 0;
  for (size_t i = 0; i < seqs.size(); ++i) {
    const StepSeq& s = seqs[i];
    const int64_t len = static_cast<int64_t>(s.tokens.size());
    if (streaming()) make_room(s.seq, len);
    const int64_t first_pos = blocks_->length(s.seq);  // cache position (streaming) = position
    const int64_t first_rope = blocks_->next_position(s.seq);  // > first_pos after evictions
    selecting = selecting || first_rope != first_pos;
    if (!blocks_->append(s.seq, s.tokens, std::span<int64_t>(slots_.data() + row, len), copies_)) {
      return Status::error("out of KV cache blocks (" + std::to_string(blocks_->num_available_blocks()) +
                           " available; raise --kv-cache-mem)");
    }
    for (int64_t j = 0; j < len; ++j) {
      tokens_[row + j] = s.tokens[j];
      positions_[row + j] = static_cast<int32_t>(first_pos + j);
      rope_positions_[row + j] = static_cast<int32_t>(first_rope + j);
      if (logits_out != nullptr && (all_rows || (s.logits && j == len - 1))) logit_rows_[n_logit_rows++] = row + j;
    }
    spans_[i] = kernels::SeqSpan{row, len, nullptr, 0};
    row += len;
  }
  // Tables are final only after every append (an append may reallocate nothing, but a
  // copy-on-write replaces the last block id), so bind them now.
  for (size_t i = 0; i < seqs.size(); ++i) {
    const std::vector<int32_t>& table = blocks_->block_table(seqs[i].seq);
    spans_[i].block_table = table.data();
    spans_[i].num_blocks = static_cast<int64_t>(table.size());
  }
  for (const kvcache::BlockCopy& c : copies_) pool_->copy_block(c.src_block, c.dst_block);
  model::Batch batch;
  batch.tokens = std::span<const int32_t>(tokens_.data(), n);
  batch.positions = std::span<const int32_t>(positions_.data(), n);
  batch.slot_mapping = std::span<const int64_t>(slots_.data(), n);
  batch.seqs = std::span<const kernels::SeqSpan>(spans_.data(), seqs.size());
  batch.logit_rows = std::span<const int64_t>(logit_rows_.data(), n_logit_rows);
  if (selecting) batch.rope_positions = std::span<const int32_t>(rope_positions_.data(), n);
  const bool scored = prepare_scores(seqs);
  if (scored) {
    batch.scores = scores_.data();
    batch.score_stride = score_stride_;
    batch.observe_from = observe_from_.data();
  }
  forward_->forward(batch, kv_views_, logits_out);
  if (scored) collect_scores(seqs);
  for (const StepSeq& s : seqs) {
    blocks_->commit(s.seq);
    if (frees_window_blocks()) release_out_of_window(s.seq);
  }
  if (tiers_ != nullptr) tiers_->poll();  // puts' completions; never waits
  return Status::ok();
}

}  // namespace pagoda::engine
