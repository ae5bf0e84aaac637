// The `pagoda` subcommands. Each registers its flags on a CLI11 app and returns the exit code
// of its run. Options shared by commands that run a model live in EngineOptions.
#pragma once

#include <CLI/CLI.hpp>
#include <string>

#include "core/clock.h"
#include "core/log.h"
#include "engine/engine.h"
#include "model/text/tokenizer.h"
#include "tools/kv_remote.h"

namespace pagoda::tools {

struct EngineOptions {
  std::string model_path;
  std::string tokenizer_path;
  int threads = 0;
  std::string kv_cache_mem;  // "" = default
  int64_t block_size = 16;
  std::string matmul_precision = "auto";  // --matmul-precision: auto or f32
  std::string kv_dtype = "f16";  // kernels::kv_dtype_name; f16 by default, as llama.cpp's and vLLM's caches
  std::string kv_layout = "nd";  // "nd" | "nz"
  int64_t ctx_size = 0;
  int64_t batch_size = 512;
  bool verbose = false;
  bool quiet = false;      // no progress bars (they are drawn only on a terminal anyway)
  bool no_prefix_cache = false;
  bool batched_bf16 = false;  // EngineConfig::batched_bf16
  std::string isa;            // EngineConfig::isa by name; "": the best this CPU runs
  std::string mla_prefill = "auto";  // EngineConfig::mla_prefill: auto | absorbed | expanded | row-walk
  std::string eviction = "lru";
  std::string kv_hash = "xxh64";
  int64_t kv_window = 0;  // StreamingLLM: tokens kept after the sinks (0: off)
  int64_t kv_sinks = 0;   // StreamingLLM: first tokens always kept
  std::string kv_select = "off";  // attention-score selection: off | h2o | snapkv (kvcache/kv_select.h)
  int64_t kv_budget = 0;          // tokens' KV a selecting sequence keeps at most
  int64_t kv_recent = 0;          // newest tokens always kept (0: the method's default)
  int64_t kv_observe = 0;         // SnapKV observation window (0: default)
  // Tiers below the pool (tools/kv_tiers.cpp).
  std::string kv_host_mem;               // "" or "0": no host tier
  std::string kv_disk_dir, kv_disk_mem;  // both or neither
  std::string kv_offload = "write-back";
  std::string kv_load = "auto";          // auto | load | recompute
  std::string preemption = "recompute";  // recompute | swap (the serving loop; engine/scheduler.h)
  KvRemoteOptions kv_remote;             // --kv-remote (tools/kv_remote.h): the last tier, on Redis
};

void add_engine_options(CLI::App& app, EngineOptions& options);
Result<engine::EngineConfig> engine_config_from(const EngineOptions& options);
// The tier flags (added by add_engine_options) and their wiring (load_engine calls it).
void add_tier_options(CLI::App& app, EngineOptions& options);
Status attach_kv_tiers(const EngineOptions& options, engine::Engine& engine, const Clock& clock, const Logger& logger);

// Loads the model and tokenizer and creates the engine.
struct LoadedEngine {
  std::unique_ptr<engine::Engine> engine;
  std::unique_ptr<model::Tokenizer> tokenizer;
  std::string chat_template;  // "" if the model has none
  std::vector<int32_t> stop_token_ids;  // end a generation besides EOS (generation_config.json, GGUF eot)
};
Result<LoadedEngine> load_engine(const EngineOptions& options, const Clock& clock, const Logger& logger);

// Prints "error: <message>" to stderr and returns 1.
int fail(const Status& status);

void register_run(CLI::App& app, const Clock& clock, Logger& logger, int& exit_code);
void register_bench(CLI::App& app, const Clock& clock, Logger& logger, int& exit_code);
void register_bench_serve(CLI::App& app, const Clock& clock, int& exit_code);
void register_info(CLI::App& app, int& exit_code);
void register_tokenize(CLI::App& app, int& exit_code);
void register_make_model(CLI::App& app, int& exit_code);
void register_convert(CLI::App& app, int& exit_code);
void register_kvcalc(CLI::App& app, int& exit_code);
void register_perplexity(CLI::App& app, const Clock& clock, Logger& logger, int& exit_code);
void register_serve(CLI::App& app, const Clock& clock, Logger& logger, int& exit_code);
void register_router(CLI::App& app, const Clock& clock, Logger& logger, int& exit_code);
void register_explain(CLI::App& app, int& exit_code);
void register_replay(CLI::App& app, int& exit_code);

}  // namespace pagoda::tools
