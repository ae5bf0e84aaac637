// pagoda perplexity: perplexity of a text, and with a non-f32 KV cache or a StreamingLLM window
// (--kv-window), how far its
// next-token distributions drift from an f32-cache run of the same model (like llama.cpp's
// llama-perplexity --kl-divergence).
//
// The text is cut into chunks of --ctx-size tokens, each starting with BOS; as llama.cpp does,
// only the second half of each chunk is scored, so every scored token has at least ctx/2 of
// context. Both engines share one copy of the weights.
#include <cmath>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "tools/commands.h"
#include "tools/model_source.h"

namespace pagoda::tools {

namespace {

struct PerplexityOptions {
  EngineOptions engine;
  std::string file;
  int64_t max_chunks = 0;  // 0: all
  bool json = false;
};

// log-softmax of one row into out.
void log_softmax(const float* logits, int64_t n, std::vector<double>& out) {
  double mx = logits[0];
  for (int64_t i = 1; i < n; ++i) mx = std::max(mx, static_cast<double>(logits[i]));
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += std::exp(logits[i] - mx);
  const double lse = mx + std::log(sum);
  for (int64_t i = 0; i < n; ++i) out[i] = logits[i] - lse;
}

int perplexity(const PerplexityOptions& o, const Clock& clock, Logger& logger) {
  logger.set_level(o.engine.verbose ? LogLevel::kDebug : LogLevel::kWarn);
  std::ifstream in(o.file, std::ios::binary);
  if (!in) return fail(Status::error(o.file + ": cannot open"));
  std::stringstream ss;
  ss << in.rdbuf();

  EngineOptions eo = o.engine;
  if (eo.ctx_size == 0) eo.ctx_size = 512;
  if (eo.ctx_size < 16) return fail(Status::error("--ctx-size must be at least 16 for perplexity"));
  auto loaded = load_engine(eo, clock, logger);
  if (!loaded.is_ok()) return fail(loaded.status());
  engine::Engine& eng = *loaded->engine;
  const model::Tokenizer& tok = *loaded->tokenizer;
  // Against the full f32 cache: a quantized KV format or a StreamingLLM window (--kv-window).
  // Or attention-score selection (--kv-select): chunk halves are the prompt (SnapKV selects
  // after it); the scored second half is fed in chunks, evicting before each.
  const kvcache::KvSelectParams select = eng.config().kv_select;
  const bool compare = eo.kv_dtype != "f32" || eo.kv_window > 0 || select.on();
  std::unique_ptr<engine::Engine> baseline;
  if (compare) {
    EngineOptions bo = eo;
    bo.kv_dtype = "f32";
    bo.kv_window = 0;
    bo.kv_sinks = 0;
    bo.kv_select = "off";
    bo.kv_budget = bo.kv_recent = bo.kv_observe = 0;
    auto config = engine_config_from(bo);
    if (!config.is_ok()) return fail(config.status());
    auto b = engine::Engine::create(eng.shared_model(), *config, clock, logger);
    if (!b.is_ok()) return fail(b.status());
    baseline = std::move(b).value();
  }

  const std::vector<int32_t> tokens = tok.encode(ss.str(), false, false);
  const int64_t n_ctx = eo.ctx_size;
  const int64_t n_chunks_all = static_cast<int64_t>(tokens.size()) / (n_ctx - 1);
  const int64_t n_chunks = o.max_chunks > 0 ? std::min(o.max_chunks, n_chunks_all) : n_chunks_all;
  if (n_chunks == 0) {
    return fail(Status::error(o.file + ": " + std::to_string(tokens.size()) + " tokens is less than one chunk of " +
                              std::to_string(n_ctx) + "; lower --ctx-size"));
  }
  const int64_t n_vocab = eng.model().config().n_vocab;
  std::vector<double> lp(n_vocab), lq(n_vocab);
  double nll = 0, nll2 = 0, nll_base = 0, kl_sum = 0;
  int64_t count = 0, top1_same = 0;
  for (int64_t c = 0; c < n_chunks; ++c) {
    std::vector<int32_t> chunk = {std::max(0, tok.bos_id())};
    chunk.insert(chunk.end(), tokens.begin() + c * (n_ctx - 1), tokens.begin() + (c + 1) * (n_ctx - 1));
    auto logits = select.on() ? eng.score(chunk, select, n_ctx / 2) : eng.score(chunk);
    if (!logits.is_ok()) return fail(logits.status());
    Result<std::vector<float>> base_logits = std::vector<float>();
    if (compare) {
      base_logits = baseline->score(chunk);
      if (!base_logits.is_ok()) return fail(base_logits.status());
    }
    for (int64_t pos = n_ctx / 2; pos + 1 < n_ctx; ++pos) {
      const float* row = logits->data() + pos * n_vocab;
      log_softmax(row, n_vocab, lq);
      const double token_nll = -lq[chunk[pos + 1]];
      nll += token_nll;
      nll2 += token_nll * token_nll;
      ++count;
      if (compare) {
        const float* base_row = base_logits->data() + pos * n_vocab;
        log_softmax(base_row, n_vocab, lp);
        nll_base += -lp[chunk[pos + 1]];
        double kl = 0;
        for (int64_t i = 0; i < n_vocab; ++i) kl += std::exp(lp[i]) * (lp[i] - lq[i]);
        kl_sum += kl;
        int64_t a = 0, b = 0;
        for (int64_t i = 1; i < n_vocab; ++i) {
          if (row[i] > row[a]) a = i;
          if (base_row[i] > base_row[b]) b = i;
        }
        top1_same += a == b;
      }
    }
    if (!o.json) std::fprintf(stderr, "[%lld/%lld] running perplexity %.4f\n", static_cast<long long>(c + 1),
                              static_cast<long long>(n_chunks), std::exp(nll / count));
  }
  const double mean = nll / count;
  const double ppl = std::exp(mean);
  // Standard error of the mean NLL, carried to perplexity (delta method).
  const double var = std::max(0.0, nll2 / count - mean * mean);
  const double ppl_err = ppl * std::sqrt(var / std::max<int64_t>(1, count - 1));
  nlohmann::json j = {{"model", o.engine.model_path.empty() ? "built-in default" : o.engine.model_path},
                      {"kv_dtype", eo.kv_dtype}, {"ctx_size", n_ctx}, {"chunks", n_chunks},
                      {"scored_tokens", count}, {"perplexity", ppl}, {"perplexity_stderr", ppl_err}};
  if (select.on()) j["kv_select"] = select.describe();
  if (compare) {
    j["perplexity_f32_kv"] = std::exp(nll_base / count);
    j["mean_kl_divergence"] = kl_sum / count;
    j["top1_agreement"] = static_cast<double>(top1_same) / count;
  }
  if (o.json) {
    std::printf("%s\n", j.dump().c_str());
    return 0;
  }
  std::printf("perplexity (KV %s): %.4f +/- %.4f over %lld tokens (%lld chunks of %lld)\n", eo.kv_dtype.c_str(), ppl,
              ppl_err, static_cast<long long>(count), static_cast<long long>(n_chunks), static_cast<long long>(n_ctx));
  if (compare) {
    std::printf("vs f32 KV: perplexity %.4f, mean KL divergence %.6f, top-1 agreement %.2f%%\n",
                j["perplexity_f32_kv"].get<double>(), j["mean_kl_divergence"].get<double>(),
                100.0 * j["top1_agreement"].get<double>());
  }
  return 0;
}

}  // namespace

void register_perplexity(CLI::App& app, const Clock& clock, Logger& logger, int& exit_code) {
  auto options = std::make_shared<PerplexityOptions>();
  CLI::App* cmd = app.add_subcommand("perplexity", "perplexity of a text; KL divergence of a quantized KV cache vs f32");
  add_engine_options(*cmd, options->engine);
  cmd->add_option("-f,--file", options->file, "text file")->required();
  cmd->add_option("--chunks", options->max_chunks, "score at most this many chunks (0: all)");
  cmd->add_flag("--json", options->json, "print one JSON object");
  cmd->callback([options, &clock, &logger, &exit_code] { exit_code = perplexity(*options, clock, logger); });
}

}  // namespace pagoda::tools
