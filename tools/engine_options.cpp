#include <cstdio>

#include "kvcache/block_hash.h"
#include "kvcache/eviction.h"
#include "kvcache/kv_layout.h"
#include "model/llama_model.h"
#include "tools/commands.h"
#include "tools/model_source.h"

namespace pagoda::tools {

void add_engine_options(CLI::App& app, EngineOptions& o) {
  app.add_option("-m,--model", o.model_path,
                 "GGUF file, llama2.c checkpoint or Hugging Face folder (default: the built-in model)");
  app.add_option("--tokenizer", o.tokenizer_path, "tokenizer.bin for a llama2.c checkpoint");
  app.add_option("-t,--threads", o.threads, "compute threads (default: all cores)");
  app.add_option("--kv-cache-mem", o.kv_cache_mem, "KV cache budget, e.g. 512M, 2G (default: 4 contexts, at most 2 GiB)");
  app.add_option("--block-size", o.block_size, "tokens per KV block")->check(CLI::Range(1, 4096));
  app.add_option("--kv-dtype", o.kv_dtype, "KV cache element format: f16 (default), f32, bf16, fp8-e4m3, fp8-e5m2, int8, int4")
      ->check(CLI::IsMember({"f32", "f16", "bf16", "fp8-e4m3", "fp8-e5m2", "int8", "int4"}));
  app.add_option("--kv-layout", o.kv_layout, "KV block layout: nd, or nz (f32/f16/bf16, block size a multiple of 16)")
      ->check(CLI::IsMember({"nd", "nz"}));
  app.add_option("-c,--ctx-size", o.ctx_size, "context length (default: the model's)");
  app.add_option("-b,--batch-size", o.batch_size, "rows per forward pass (prefill chunk)")->check(CLI::Range(1, 65536));
  app.add_flag("-v,--verbose", o.verbose, "debug logging: each step's scheduling decisions (serve), each tier load-or-recompute decision, the kernels chosen");
  app.add_flag("-q,--quiet", o.quiet, "no progress bars (drawn only when stderr is a terminal)");
  app.add_flag("--no-prefix-cache", o.no_prefix_cache, "do not reuse cached KV of earlier prompts");
  app.add_flag("--batched-bf16", o.batched_bf16,
               "f16/bf16 weights: held as bf16 (f16 rounded once at load) and batched decode steps of 16+ sequences "
               "multiply in bf16 (faster; a sequence's logits then vary, at bf16 rounding, with how many others "
               "share its step)");
  app.add_option("--matmul-precision", o.matmul_precision,
                 "arithmetic of f16/bf16 weights: auto (default: the fastest this CPU has; bf16 prefill with "
                 "AVX512-BF16, AMX tiles) or f32 (f32 on every path); the start-up log states which")
      ->check(CLI::IsMember({"auto", "f32"}));
  app.add_option("--isa", o.isa,
                 std::string("kernels' instruction set: scalar, avx2, avx512 or amx, at most what this CPU has (default: "
                             "the best it has, here ") + kernels::isa_name(kernels::detect_isa()) + ")")
      ->check(CLI::IsMember({"scalar", "avx2", "avx512", "amx"}));
  app.add_option("--mla-prefill", o.mla_prefill,
                 "MLA (deepseek2) prefill chunks: auto (default: the expanded form, keys and values decompressed per "
                 "chunk, where it costs fewer multiply-adds than the absorbed one), absorbed, expanded or row-walk")
      ->check(CLI::IsMember({"auto", "absorbed", "expanded", "row-walk"}));
  app.add_option("--eviction", o.eviction, "which cached KV blocks go first when memory is needed")
      ->check(CLI::IsMember({"lru", "lfu", "priority"}));
  app.add_option("--kv-hash", o.kv_hash,
                 "block hash of the prefix cache: xxh64 (fast), or sha256 (collision-resistant: tenants cannot craft "
                 "another's block names); instances and routers that share blocks must agree")
      ->check(CLI::IsMember({"xxh64", "sha256"}));
  app.add_option("--kv-window", o.kv_window,
                 "StreamingLLM: keep the last W tokens (plus the sinks) in the KV cache and generate past its size; "
                 "rounded up to whole blocks, at least 2")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 22));
  app.add_option("--kv-sinks", o.kv_sinks, "StreamingLLM: the first S tokens always stay (attention sinks; "
                 "rounded up to whole blocks; needs --kv-window)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 22));
  app.add_option("--kv-select", o.kv_select,
                 "attention-score KV selection: h2o (keep heavy hitters by accumulated attention) or snapkv (select "
                 "the prompt by its last --kv-observe rows' attention, once); sequences keep at most --kv-budget "
                 "tokens' KV and are never prefix-cached")
      ->check(CLI::IsMember({"off", "h2o", "snapkv"}));
  app.add_option("--kv-budget", o.kv_budget, "--kv-select: tokens' KV a sequence keeps at most")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 22));
  app.add_option("--kv-recent", o.kv_recent, "--kv-select: newest tokens always kept (default: budget/2; snapkv: "
                 "min(observe, budget/2))")->check(CLI::Range(int64_t{0}, int64_t{1} << 22));
  app.add_option("--kv-observe", o.kv_observe, "--kv-select snapkv: observation window, the prompt's last W rows "
                 "(default min(32, budget/2))")->check(CLI::Range(int64_t{0}, int64_t{1} << 22));
  add_tier_options(app, o);
}

Result<engine::EngineConfig> engine_config_from(const EngineOptions& o) {
  engine::EngineConfig config;
  config.num_threads = o.threads;
  if (!o.kv_cache_mem.empty()) {
    PAGODA_ASSIGN_OR_RETURN(config.kv_cache_bytes, kvcache::parse_bytes(o.kv_cache_mem));
    if (config.kv_cache_bytes <= 0) return Status::error("--kv-cache-mem must be positive");
  }
  config.block_size = o.block_size;
  const auto kv_dtype = kernels::kv_dtype_from_name(o.kv_dtype);
  if (!kv_dtype) return Status::error("unknown --kv-dtype '" + o.kv_dtype + "' (f32, f16, bf16, fp8-e4m3, fp8-e5m2, int8, int4)");
  config.kv_dtype = *kv_dtype;
  const auto kv_layout = kernels::kv_layout_from_name(o.kv_layout);
  if (!kv_layout) return Status::error("unknown --kv-layout '" + o.kv_layout + "' (nd, nz)");
  config.kv_layout = *kv_layout;
  config.enable_prefix_caching = !o.no_prefix_cache;
  config.batched_bf16 = o.batched_bf16;
  config.f32_matmul = o.matmul_precision == "f32";
  if (!o.isa.empty()) {
    const auto isa = kernels::isa_from_name(o.isa);
    if (!isa) return Status::error("unknown --isa '" + o.isa + "' (scalar, avx2, avx512, amx)");
    if (*isa > kernels::detect_isa()) {
      return Status::error("--isa " + o.isa + ": this CPU runs at most " + kernels::isa_name(kernels::detect_isa()));
    }
    config.isa = *isa;
  }
  config.mla_prefill = o.mla_prefill == "absorbed"   ? model::MlaPrefill::kAbsorbed
                       : o.mla_prefill == "expanded" ? model::MlaPrefill::kExpanded
                       : o.mla_prefill == "row-walk" ? model::MlaPrefill::kRowWalk
                                                     : model::MlaPrefill::kAuto;
  config.eviction = *kvcache::eviction_policy_from_name(o.eviction);
  config.kv_hash = *kvcache::block_hash_scheme_from_flag(o.kv_hash);
  if (config.kv_layout == kernels::KvLayoutKind::kNZ) {  // fail before loading the model
    if (kernels::kv_dtype_is_quantized(config.kv_dtype)) {
      return Status::error("--kv-layout nz needs --kv-dtype f32, f16 or bf16, not " + o.kv_dtype);
    }
    if (o.block_size % 16 != 0) {
      return Status::error("--kv-layout nz needs a --block-size that is a multiple of 16, not " + std::to_string(o.block_size));
    }
  }
  if (o.kv_sinks > 0 && o.kv_window == 0) return Status::error("--kv-sinks needs --kv-window");
  if (o.kv_window > 0 && config.kv_dtype == kernels::KvDType::kInt4) {
    return Status::error("--kv-window re-rotates cached K, which --kv-dtype int4 cannot do; use f32, f16, bf16, int8 or fp8");
  }
  config.kv_window = o.kv_window;
  config.kv_sinks = o.kv_sinks;
  const auto method = kvcache::kv_select_method_from_name(o.kv_select);
  if (!method) return Status::error("unknown --kv-select '" + o.kv_select + "' (off, h2o, snapkv)");
  config.kv_select.method = *method;
  if (config.kv_select.on() && o.kv_budget <= 0) return Status::error("--kv-select needs --kv-budget N");
  if (!config.kv_select.on() && (o.kv_budget > 0 || o.kv_recent > 0 || o.kv_observe > 0)) {
    return Status::error("--kv-budget, --kv-recent and --kv-observe need --kv-select h2o|snapkv");
  }
  config.kv_select.budget = o.kv_budget;
  config.kv_select.recent = o.kv_recent;
  config.kv_select.observe = o.kv_observe;
  PAGODA_RETURN_IF_ERROR(kvcache::normalize_kv_select(config.kv_select));
  config.max_context = o.ctx_size;
  config.max_batch_tokens = o.batch_size;
  return config;
}

Result<LoadedEngine> load_engine(const EngineOptions& o, const Clock& clock, const Logger& logger) {
  PAGODA_ASSIGN_OR_RETURN(engine::EngineConfig config, engine_config_from(o));
  PAGODA_ASSIGN_OR_RETURN(LoadedModel source, load_model(o.model_path, o.tokenizer_path, !o.quiet));
  PAGODA_RETURN_IF_ERROR(engine::prepare_batched_bf16(*source.model, config, logger));
  LoadedEngine loaded;
  loaded.tokenizer = std::move(source.tokenizer);
  loaded.chat_template = std::move(source.chat_template);
  loaded.stop_token_ids = std::move(source.stop_token_ids);
  const std::string name = o.model_path.empty() ? std::string("built-in default model") : o.model_path;
  const model::ModelConfig& mc = source.model->config();
  logger.info(name + ": " + mc.arch_name + ", " + std::to_string(mc.n_layer) + " layers, width " +
              std::to_string(mc.n_embd) + ", heads " + std::to_string(mc.n_head) + "/" + std::to_string(mc.n_kv_head) +
              ", vocab " + std::to_string(mc.n_vocab) + ", weights " + kvcache::format_bytes(source.model->weight_bytes()));
  PAGODA_ASSIGN_OR_RETURN(loaded.engine, engine::Engine::create(std::move(source.model), config, clock, logger));
  PAGODA_RETURN_IF_ERROR(attach_kv_tiers(o, *loaded.engine, clock, logger));
  return loaded;
}

int fail(const Status& status) {
  std::fprintf(stderr, "error: %s\n", status.message().c_str());
  return 1;
}

}  // namespace pagoda::tools
