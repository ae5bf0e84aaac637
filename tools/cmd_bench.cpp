// pagoda bench: prefill and decode tokens/s, median of r runs (after one warm-up run).
#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "core/rng.h"
#include "kernels/matmul.h"
#include "tools/bench_tiers.h"
#include "tools/commands.h"
#include "tools/progress.h"

namespace pagoda::tools {

namespace {

struct BenchOptions {
  EngineOptions engine;
  int64_t n_prompt = 512;
  int64_t n_gen = 128;
  int64_t depth = 0;  // decode test: tokens already in the KV cache (an untimed prompt) before decoding
  int reps = 5;
  bool json = false;
  int64_t prefix_ttft = 0;  // > 0: TTFT with a cached prefix of this many tokens vs uncached
  bool tiers = false;       // with prefix_ttft: the prefix in the pool / host / disk tier vs recomputed
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// TTFT of prompts = a shared N-token prefix + a fresh 16-token suffix, with the prefix cached
// (salt "warm", filled by an untimed request) vs not (a new salt every time: no hit).
int bench_prefix_ttft(const BenchOptions& o, engine::Engine& eng, const model::Tokenizer& tok) {
  const int64_t n_vocab = eng.model().config().n_vocab;
  Rng rng(43);
  auto random_tokens = [&](int64_t n) {
    std::vector<int32_t> out;
    while (static_cast<int64_t>(out.size()) < n) {
      const auto id = static_cast<int32_t>(rng.next_u64() % n_vocab);
      if (tok.vocab().types[id] == model::TokenType::kNormal) out.push_back(id);
    }
    return out;
  };
  std::vector<int32_t> prefix = {std::max(0, tok.bos_id())};
  const std::vector<int32_t> body = random_tokens(o.prefix_ttft - 1);
  prefix.insert(prefix.end(), body.begin(), body.end());
  auto make = [&](const std::string& salt) {
    engine::GenerateRequest r;
    r.prompt = prefix;
    const std::vector<int32_t> suffix = random_tokens(16);
    r.prompt.insert(r.prompt.end(), suffix.begin(), suffix.end());
    r.max_new_tokens = 1;
    r.cache_salt = salt;
    return r;
  };
  if (auto warmup = eng.generate(make("warm")); !warmup.is_ok()) return fail(warmup.status());
  std::vector<double> cold, warm;
  int64_t cached_tokens = 0;
  ProgressBar bar("bench runs", !o.engine.quiet, /*bytes=*/false);
  for (int r = 0; r < o.reps; ++r) {
    bar.update(r, o.reps);
    auto c = eng.generate(make("cold-" + std::to_string(r)));
    if (!c.is_ok()) return fail(c.status());
    auto w = eng.generate(make("warm"));
    if (!w.is_ok()) return fail(w.status());
    cold.push_back(c->stats.ttft_s * 1e3);
    warm.push_back(w->stats.ttft_s * 1e3);
    cached_tokens = w->stats.cached_tokens;
  }
  const double cold_ms = median(cold), warm_ms = median(warm);
  if (o.json) {
    nlohmann::json j = {{"model", o.engine.model_path}, {"prefix_tokens", o.prefix_ttft}, {"suffix_tokens", 16},
                        {"cached_tokens", cached_tokens}, {"ttft_uncached_ms", cold_ms}, {"ttft_cached_ms", warm_ms},
                        {"ratio", cold_ms / warm_ms}, {"uncached_runs_ms", cold}, {"cached_runs_ms", warm}};
    std::printf("%s\n", j.dump().c_str());
    return 0;
  }
  bar.finish();
  std::printf("| prompt | prefix cached | TTFT ms (median of %d) |\n|---|---|---:|\n", o.reps);
  std::printf("| %lld + 16 tokens | no | %.2f |\n", static_cast<long long>(o.prefix_ttft), cold_ms);
  std::printf("| %lld + 16 tokens | yes (%lld tokens) | %.2f |\n", static_cast<long long>(o.prefix_ttft),
              static_cast<long long>(cached_tokens), warm_ms);
  std::printf("TTFT ratio uncached / cached: %.1fx\n", cold_ms / warm_ms);
  return 0;
}

int bench(const BenchOptions& o, const Clock& clock, Logger& logger) {
  logger.set_level(o.engine.verbose ? LogLevel::kDebug : LogLevel::kWarn);
  EngineOptions eo = o.engine;
  // The prefill test repeats one prompt: with the prefix cache on, every rep after the first
  // would be served from cache. Only the --prefix-ttft test uses it.
  if (o.prefix_ttft == 0) eo.no_prefix_cache = true;
  if (o.tiers) eo.kv_load = "load";  // the table measures loads: never let the cost model skip one
  if (eo.ctx_size == 0) eo.ctx_size = std::max<int64_t>({o.n_prompt, o.depth + o.n_gen + 1, o.prefix_ttft + 17}) + 16;
  auto loaded = load_engine(eo, clock, logger);
  if (!loaded.is_ok()) return fail(loaded.status());
  engine::Engine& eng = *loaded->engine;
  const model::Tokenizer& tok = *loaded->tokenizer;
  const int64_t n_vocab = eng.model().config().n_vocab;
  if (o.prefix_ttft > 0 && o.tiers) {
    return bench_tier_ttft(TierTtftOptions{o.prefix_ttft, o.reps, o.json, o.engine.quiet, o.engine.model_path}, eng, tok);
  }
  if (o.prefix_ttft > 0) return bench_prefix_ttft(o, eng, tok);

  // Prompt: random normal tokens (fixed seed), BOS first, as llama-bench does.
  engine::GenerateRequest prefill;
  Rng rng(42);
  prefill.prompt.push_back(std::max(0, tok.bos_id()));
  while (static_cast<int64_t>(prefill.prompt.size()) < o.n_prompt) {
    const auto id = static_cast<int32_t>(rng.next_u64() % n_vocab);
    if (tok.vocab().types[id] == model::TokenType::kNormal) prefill.prompt.push_back(id);
  }
  prefill.max_new_tokens = 0;
  engine::GenerateRequest decode;
  decode.prompt = {std::max(0, tok.bos_id())};
  while (static_cast<int64_t>(decode.prompt.size()) < o.depth) {  // --depth: as llama-bench -d
    const auto id = static_cast<int32_t>(rng.next_u64() % n_vocab);
    if (tok.vocab().types[id] == model::TokenType::kNormal) decode.prompt.push_back(id);
  }
  decode.max_new_tokens = o.n_gen + 1;  // the first token comes from prefill; n_gen decode steps follow

  std::vector<double> prefill_tps, decode_tps;
  ProgressBar bar("bench runs", !o.engine.quiet, /*bytes=*/false);
  for (int r = 0; r <= o.reps; ++r) {  // run 0 is the warm-up
    bar.update(r, o.reps + 1);
    if (o.n_prompt > 0) {
      auto res = eng.generate(prefill);
      if (!res.is_ok()) return fail(res.status());
      if (r > 0) prefill_tps.push_back(res->stats.prefill_tps());
    }
    if (o.n_gen > 0) {
      auto res = eng.generate(decode);
      if (!res.is_ok()) return fail(res.status());
      if (r > 0) decode_tps.push_back(res->stats.decode_tps());
    }
  }
  bar.finish();
  const double pp = prefill_tps.empty() ? 0 : median(prefill_tps);
  const double tg = decode_tps.empty() ? 0 : median(decode_tps);
  const std::string model_name = o.engine.model_path.empty() ? "built-in default" : o.engine.model_path;
  const int64_t weight_bytes = eng.model().weight_bytes();
  if (o.json) {
    nlohmann::json j = {{"model", model_name},       {"threads", eng.num_threads()},
                        {"isa", kernels::isa_name(eng.config().isa)},
                        {"n_prompt", o.n_prompt},     {"n_gen", o.n_gen}, {"depth", o.depth},
                        {"reps", o.reps},             {"prefill_tps", pp},
                        {"decode_tps", tg},           {"prefill_tps_runs", prefill_tps},
                        {"decode_tps_runs", decode_tps}, {"weight_bytes", weight_bytes}};
    std::printf("%s\n", j.dump().c_str());
    return 0;
  }
  std::printf("| model | threads | isa | test | tokens/s (median of %d) |\n|---|---|---|---|---|\n", o.reps);
  std::printf("| %s | %d | %s | pp%lld | %.2f |\n", model_name.c_str(), eng.num_threads(),
              kernels::isa_name(eng.config().isa), static_cast<long long>(o.n_prompt), pp);
  std::printf("| %s | %d | %s | tg%lld | %.2f |\n", model_name.c_str(), eng.num_threads(),
              kernels::isa_name(eng.config().isa), static_cast<long long>(o.n_gen), tg);
  return 0;
}

}  // namespace

void register_bench(CLI::App& app, const Clock& clock, Logger& logger, int& exit_code) {
  auto options = std::make_shared<BenchOptions>();
  CLI::App* cmd = app.add_subcommand("bench", "measure prefill and decode speed");
  add_engine_options(*cmd, options->engine);
  cmd->add_option("-p,--n-prompt", options->n_prompt, "prompt tokens for the prefill test")->check(CLI::Range(int64_t{0}, int64_t{1} << 20));
  cmd->add_option("-n,--n-gen", options->n_gen, "tokens for the decode test")->check(CLI::Range(int64_t{0}, int64_t{1} << 20));
  cmd->add_option("-d,--depth,--decode-context", options->depth,
                  "decode test: tokens in the KV cache before decoding (an untimed prompt)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 20));
  cmd->add_option("-r,--reps", options->reps, "repetitions (median reported)")->check(CLI::Range(1, 1000));
  cmd->add_flag("--json", options->json, "print one JSON object");
  cmd->add_option("--prefix-ttft", options->prefix_ttft,
                  "instead: TTFT of prompts whose first N tokens are cached vs not")->check(CLI::Range(int64_t{0}, int64_t{1} << 20));
  cmd->add_flag("--tiers", options->tiers,
                "with --prefix-ttft: the prefix in the pool, the host tier, the disk tier, or recomputed "
                "(needs --kv-host-mem and --kv-disk-dir)");
  cmd->callback([options, &clock, &logger, &exit_code] { exit_code = bench(*options, clock, logger); });
}

}  // namespace pagoda::tools
