// pagoda run: generate from a prompt, streaming text, then the stats.
#include <cstdio>
#include <nlohmann/json.hpp>
#include <random>

#include "tools/commands.h"

namespace pagoda::tools {

namespace {

struct RunOptions {
  EngineOptions engine;
  std::string prompt;
  int64_t n_predict = 128;
  float temp = 0.8f;
  int32_t top_k = 40;
  float top_p = 0.95f;
  float min_p = 0.05f;
  float repeat_penalty = 1.0f;
  int32_t repeat_last_n = 64;
  int64_t seed = -1;
  bool json = false;
  bool no_bos = false;
  bool ignore_eos = false;
  int parallel = 1;
  bool kv_dump = false;
  std::string cache_salt;
};

// --parallel K: K samples of one prompt sharing its KV blocks (copy-on-write forks).
int run_parallel(const RunOptions& o, engine::Engine& eng, const model::Tokenizer& tok,
                 const engine::GenerateRequest& request) {
  auto result = eng.generate_parallel(request, o.parallel);
  if (!result.is_ok()) return fail(result.status());
  const std::string prompt_text = tok.decode(request.prompt);
  nlohmann::json samples = nlohmann::json::array();
  for (size_t i = 0; i < result->samples.size(); ++i) {
    const engine::GenerateResult& r = result->samples[i];
    std::vector<int32_t> all = request.prompt;
    all.insert(all.end(), r.tokens.begin(), r.tokens.end());
    const std::string text = tok.decode(all).substr(prompt_text.size());
    if (o.json) {
      samples.push_back({{"text", text}, {"token_ids", r.tokens}, {"seed", request.sampling.seed + i},
                         {"finish_reason", engine::finish_reason_name(r.finish_reason)}});
    } else {
      std::printf("--- sample %zu (seed %llu, %s)\n%s%s\n", i, static_cast<unsigned long long>(request.sampling.seed + i),
                  engine::finish_reason_name(r.finish_reason), prompt_text.c_str(), text.c_str());
      if (r.kv_dump) std::printf("KV cache: %s", engine::format_kv_dump(*r.kv_dump).c_str());
    }
  }
  const int64_t saved = result->kv_blocks_independent - result->kv_blocks_shared;
  if (o.json) {
    nlohmann::json j = {{"samples", samples}, {"kv_blocks_shared", result->kv_blocks_shared},
                        {"kv_blocks_independent", result->kv_blocks_independent}, {"kv_blocks_saved", saved}};
    std::printf("%s\n", j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
    return 0;
  }
  std::printf("\n%d samples hold %lld KV blocks; %d independent runs would hold %lld: %lld blocks saved\n",
              o.parallel, static_cast<long long>(result->kv_blocks_shared), o.parallel,
              static_cast<long long>(result->kv_blocks_independent), static_cast<long long>(saved));
  return 0;
}

int run(const RunOptions& o, const Clock& clock, Logger& logger) {
  logger.set_level(o.engine.verbose ? LogLevel::kDebug : o.json ? LogLevel::kWarn : LogLevel::kInfo);
  auto loaded = load_engine(o.engine, clock, logger);
  if (!loaded.is_ok()) return fail(loaded.status());
  engine::Engine& eng = *loaded->engine;
  const model::Tokenizer& tok = *loaded->tokenizer;

  engine::GenerateRequest request;
  request.prompt = tok.encode(o.prompt, !o.no_bos && tok.vocab().add_bos, false);
  if (request.prompt.empty()) request.prompt.push_back(tok.bos_id() >= 0 ? tok.bos_id() : 0);
  request.max_new_tokens = o.n_predict;
  request.sampling.temperature = o.temp;
  request.sampling.top_k = o.top_k;
  request.sampling.top_p = o.top_p;
  request.sampling.min_p = o.min_p;
  request.sampling.repetition_penalty = o.repeat_penalty;
  request.sampling.repeat_last_n = o.repeat_last_n;
  request.sampling.seed = o.seed >= 0 ? static_cast<uint64_t>(o.seed) : std::random_device{}();
  if (!o.ignore_eos) {
    // End of text: EOS, and BOS (llama2.c-trained models mark a new story with BOS).
    for (int32_t id : {tok.eos_id(), tok.bos_id()}) {
      if (id >= 0) request.stop_token_ids.push_back(id);
    }
    // And every other end of generation the model names (generation_config.json, GGUF eot).
    request.stop_token_ids.insert(request.stop_token_ids.end(), loaded->stop_token_ids.begin(),
                                  loaded->stop_token_ids.end());
  }

  request.cache_salt = o.cache_salt;
  request.dump_kv = o.kv_dump;
  if (o.parallel > 1) return run_parallel(o, eng, tok, request);

  model::StreamDecoder stream(tok);
  std::string text;
  for (int32_t id : request.prompt) {
    std::string piece = stream.push(id);
    if (!o.json) std::fputs(piece.c_str(), stdout);
  }
  auto result = eng.generate(request, [&](int32_t id) {
    std::string piece = stream.push(id);
    text += piece;
    if (!o.json) {
      std::fputs(piece.c_str(), stdout);
      std::fflush(stdout);
    }
    return true;
  });
  if (!result.is_ok()) {
    if (!o.json) std::fputs("\n", stdout);
    return fail(result.status());
  }
  const std::string rest = stream.flush();
  text += rest;
  const engine::GenerateStats& s = result->stats;
  if (o.json) {
    nlohmann::json j;
    j["prompt"] = o.prompt;
    j["prompt_token_ids"] = request.prompt;
    j["text"] = text;
    j["token_ids"] = result->tokens;
    j["finish_reason"] = engine::finish_reason_name(result->finish_reason);
    j["seed"] = request.sampling.seed;
    if (result->kv_dump) j["kv_dump"] = engine::format_kv_dump(*result->kv_dump);
    const kvcache::BlockManagerStats& cs = eng.block_manager().stats();
    j["prefix_cache"] = {{"eviction", kvcache::eviction_policy_name(eng.block_manager().eviction_policy())},
                         {"lookups", cs.num_lookups}, {"hit_tokens", cs.num_hit_tokens},
                         {"missed_tokens", cs.num_missed_tokens}, {"evictions", cs.num_evictions}};
    j["stats"] = {{"prompt_tokens", s.prompt_tokens}, {"cached_tokens", s.cached_tokens}, {"generated_tokens", s.generated_tokens},
                  {"ttft_ms", s.ttft_s * 1e3}, {"prefill_tps", s.prefill_tps()}, {"decode_tps", s.decode_tps()},
                  {"kv_blocks_used", s.kv_blocks_used}, {"kv_block_size", eng.kv_layout().block_size}};
    std::printf("%s\n", j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
    return 0;
  }
  std::printf("%s\n\n", rest.c_str());
  std::printf("prompt tokens    %lld\n", static_cast<long long>(s.prompt_tokens));
  std::printf("TTFT             %.2f ms\n", s.ttft_s * 1e3);
  std::printf("prefill          %.1f tokens/s\n", s.prefill_tps());
  std::printf("generated tokens %lld (%s)\n", static_cast<long long>(s.generated_tokens),
              engine::finish_reason_name(result->finish_reason));
  std::printf("decode           %.1f tokens/s\n", s.decode_tps());
  std::printf("KV blocks used   %lld of %lld (block size %lld), prompt tokens from cache %lld\n",
              static_cast<long long>(s.kv_blocks_used), static_cast<long long>(eng.kv_plan().num_blocks),
              static_cast<long long>(eng.kv_layout().block_size), static_cast<long long>(s.cached_tokens));
  const kvcache::BlockManagerStats& cs = eng.block_manager().stats();
  std::printf("prefix cache     %s eviction: %lld lookups, %lld hit tokens, %lld missed, %lld evictions\n",
              std::string(kvcache::eviction_policy_name(eng.block_manager().eviction_policy())).c_str(),
              static_cast<long long>(cs.num_lookups), static_cast<long long>(cs.num_hit_tokens),
              static_cast<long long>(cs.num_missed_tokens), static_cast<long long>(cs.num_evictions));
  if (result->kv_dump) std::printf("\nKV cache of the sequence: %s", engine::format_kv_dump(*result->kv_dump).c_str());
  return 0;
}

}  // namespace

void register_run(CLI::App& app, const Clock& clock, Logger& logger, int& exit_code) {
  auto options = std::make_shared<RunOptions>();
  CLI::App* cmd = app.add_subcommand("run", "generate text from a prompt");
  add_engine_options(*cmd, options->engine);
  cmd->add_option("-p,--prompt", options->prompt, "prompt text");
  cmd->add_option("-n,--n-predict", options->n_predict, "tokens to generate")->check(CLI::Range(int64_t{0}, int64_t{1} << 24));
  cmd->add_option("--temp", options->temp, "temperature (0 = greedy)");
  cmd->add_option("--top-k", options->top_k, "top-k (0 = off)");
  cmd->add_option("--top-p", options->top_p, "top-p (1 = off)");
  cmd->add_option("--min-p", options->min_p, "min-p (0 = off)");
  cmd->add_option("--repeat-penalty", options->repeat_penalty, "repetition penalty (1 = off)");
  cmd->add_option("--repeat-last-n", options->repeat_last_n, "tokens the penalty looks back over");
  cmd->add_option("-s,--seed", options->seed, "sampling seed (default: random)");
  cmd->add_flag("--json", options->json, "print one JSON object instead of streaming text");
  cmd->add_flag("--no-bos", options->no_bos, "do not prepend BOS");
  cmd->add_flag("--ignore-eos", options->ignore_eos, "do not stop at end-of-text tokens");
  cmd->add_option("--parallel", options->parallel, "samples of the prompt sharing its KV blocks (seeds seed..seed+K-1)")
      ->check(CLI::Range(1, 256));
  cmd->add_flag("--kv-dump", options->kv_dump, "print each sequence's block table, ref counts, hashes and K values");
  cmd->add_option("--cache-salt", options->cache_salt, "prefix-cache entries are shared only within one salt");
  cmd->callback([options, &clock, &logger, &exit_code] { exit_code = run(*options, clock, logger); });
}

}  // namespace pagoda::tools
