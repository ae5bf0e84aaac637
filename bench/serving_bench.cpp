// Continuous batching vs one request at a time, in process (no HTTP): C concurrent requests of
// P random prompt tokens and G generated tokens (greedy, EOS ignored) through a ServingEngine
// with max_num_seqs = C, then the same requests with max_num_seqs = 1. Prints one table.
//
//   serving_bench MODEL.gguf [C=16] [P=64] [G=64] [threads=0: all cores] [max_batched_tokens=512] [one_at_a_time=1] [step_budget_ms=100] [batched_bf16=0] [kv_dtype=f32]
// (one_at_a_time=0 skips the max_num_seqs = 1 run; batched_bf16=1 is --batched-bf16,
// EngineConfig::batched_bf16; kv_dtype as --kv-dtype.)
//
// Smoke run: serving_bench ../shared/models/stories260K/stories260K.gguf 4 16 8 1
// Target (the issue): llama-110m, C=16, P=G=64: batched >= 3x the one-at-a-time tokens/s.
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <condition_variable>
#include <string>

#include "core/clock.h"
#include "core/log.h"
#include "core/rng.h"
#include "engine/serving.h"
#include "kernels/kv_format.h"
#include "model/text/gguf_vocab.h"

namespace {

using namespace pagoda;

class Counter final : public engine::RequestObserver {
 public:
  void on_tokens(std::span<const engine::TokenEvent>) override {}
  void on_choice_end(const engine::ChoiceEnd&) override {}
  void on_finish(const Status& status, const engine::RequestUsage& usage) override {
    std::lock_guard<std::mutex> lock(mutex_);
    ok_ = ok_ && status.is_ok();
    tokens_ += usage.completion_tokens;
    ttft_sum_ += usage.ttft_s;
    ++finished_;
    done_.notify_all();
  }
  void wait(int n) {
    std::unique_lock<std::mutex> lock(mutex_);
    done_.wait(lock, [&] { return finished_ >= n; });
  }
  int64_t tokens() const { return tokens_; }
  double mean_ttft(int n) const { return ttft_sum_ / n; }
  bool ok() const { return ok_; }

 private:
  std::mutex mutex_;
  std::condition_variable done_;
  int finished_ = 0;
  int64_t tokens_ = 0;
  double ttft_sum_ = 0;
  bool ok_ = true;
};

struct Run {
  double seconds = 0, tokens_per_s = 0, mean_ttft_s = 0;
  int64_t steps = 0;
};

Result<Run> run(const std::shared_ptr<const model::LlamaModel>& model, std::shared_ptr<const model::Tokenizer> tok,
                int64_t concurrency, int64_t max_num_seqs, int64_t prompt, int64_t gen, int threads, int64_t batched, double step_budget_ms,
                bool batched_bf16, kernels::KvDType kv_dtype, kernels::Isa isa, bool f32_matmul) {
  SteadyClock clock;
  Logger logger(LogLevel::kSilent);
  engine::EngineConfig ec;
  ec.num_threads = threads;
  ec.max_batch_tokens = batched;
  ec.batched_bf16 = batched_bf16;
  ec.isa = isa;
  ec.f32_matmul = f32_matmul;
  const model::ModelConfig& mc = model->config();
  // KV for every request at once (plus a block of slack each, f32-sized): no preemption.
  ec.kv_dtype = kv_dtype;
  ec.kv_cache_bytes = (concurrency * (prompt + gen + 32) + 256) * 2 * mc.n_layer * mc.n_kv_head * mc.head_dim * 4;
  ec.enable_prefix_caching = false;  // distinct prompts anyway; measure compute only
  PAGODA_ASSIGN_OR_RETURN(auto eng, engine::Engine::create(model, ec, clock, logger));
  engine::ServingConfig sc;
  sc.max_num_seqs = max_num_seqs;
  sc.max_num_batched_tokens = batched;
  sc.step_budget_ms = step_budget_ms;
  sc.max_waiting = concurrency;
  PAGODA_ASSIGN_OR_RETURN(auto se, engine::ServingEngine::create(std::move(eng), tok, sc));
  auto counter = std::make_shared<Counter>();
  Rng rng(1234);
  const int64_t n_vocab = std::min<int64_t>(tok->vocab_size(), model->config().n_vocab);
  const int64_t t0 = clock.now_ns();
  for (int64_t i = 0; i < concurrency; ++i) {
    engine::CompletionRequest r;
    r.prompt.resize(prompt);
    for (int32_t& t : r.prompt) t = static_cast<int32_t>(3 + rng.next_u64() % (n_vocab - 3));
    r.max_tokens = gen;
    r.ignore_eos = true;
    PAGODA_RETURN_IF_ERROR(se->submit(std::move(r), counter).status());
  }
  se->start();  // after every submit: all C requests are there from the first step
  counter->wait(static_cast<int>(concurrency));
  Run out;
  out.seconds = (clock.now_ns() - t0) * 1e-9;
  out.steps = se->metrics().steps;
  se->shutdown(true);
  if (!counter->ok()) return Status::error("a request failed");
  out.tokens_per_s = counter->tokens() / out.seconds;
  out.mean_ttft_s = counter->mean_ttft(static_cast<int>(concurrency));
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s MODEL.gguf [C=16] [P=64] [G=64] [threads=0] [max_batched_tokens=512] [one_at_a_time=1] [step_budget_ms=100] [batched_bf16=0] [kv_dtype=f32] [isa=best] [matmul=auto|f32]\n", argv[0]);
    return 2;
  }
  auto arg = [&](int i, int64_t def) { return argc > i ? std::atoll(argv[i]) : def; };
  const int64_t c = arg(2, 16), p = arg(3, 64), g = arg(4, 64), batched = arg(6, 512);
  const int threads = static_cast<int>(arg(5, 0));
  const double step_budget_ms = static_cast<double>(arg(8, static_cast<int64_t>(engine::ServingConfig{}.step_budget_ms)));
  bool batched_bf16 = arg(9, 0) != 0;
  const auto kv_dtype = kernels::kv_dtype_from_name(argc > 10 ? argv[10] : "f32");
  if (!kv_dtype) {
    std::fprintf(stderr, "unknown kv_dtype '%s'\n", argv[10]);
    return 2;
  }
  const std::string isa_name = argc > 11 ? argv[11] : "best";
  const std::optional<kernels::Isa> isa = isa_name == "best" ? kernels::detect_isa() : kernels::isa_from_name(isa_name);
  if (!isa || *isa > kernels::detect_isa()) {
    std::fprintf(stderr, "isa '%s': not one this CPU runs (best: %s)\n", isa_name.c_str(), kernels::isa_name(kernels::detect_isa()));
    return 2;
  }
  const std::string matmul = argc > 12 ? argv[12] : "auto";
  if (matmul != "auto" && matmul != "f32") {
    std::fprintf(stderr, "matmul '%s': auto or f32\n", matmul.c_str());
    return 2;
  }
  const bool f32_matmul = matmul == "f32";
  auto file = model::GgufFile::read(argv[1]);
  if (!file.is_ok()) {
    std::fprintf(stderr, "%s\n", file.status().message().c_str());
    return 1;
  }
  auto vocab = model::vocab_from_gguf(*file);
  if (!vocab.is_ok()) {
    std::fprintf(stderr, "%s\n", vocab.status().message().c_str());
    return 1;
  }
  auto tok = model::Tokenizer::create(std::move(vocab).value());
  auto model = model::LlamaModel::load(std::move(file).value());
  if (!tok.is_ok() || !model.is_ok()) {
    std::fprintf(stderr, "%s\n", (tok.is_ok() ? model.status() : tok.status()).message().c_str());
    return 1;
  }
  engine::EngineConfig bf16_config;  // --batched-bf16 as tools/ applies it (ignored where no bf16 GEMM runs)
  bf16_config.batched_bf16 = batched_bf16;
  bf16_config.isa = *isa;
  bf16_config.f32_matmul = f32_matmul;
  const Logger bf16_logger(LogLevel::kWarn);
  if (const Status s = engine::prepare_batched_bf16(*model.value(), bf16_config, bf16_logger); !s.is_ok()) {
    std::fprintf(stderr, "%s\n", s.message().c_str());
    return 1;
  }
  batched_bf16 = bf16_config.batched_bf16;
  std::shared_ptr<const model::LlamaModel> m = std::move(model).value();
  auto t = std::make_shared<const model::Tokenizer>(std::move(tok).value());
  std::printf("serving_bench: %s, %lld requests x (%lld prompt + %lld generated) tokens, max_num_batched_tokens %lld%s, KV %s\n",
              argv[1], static_cast<long long>(c), static_cast<long long>(p), static_cast<long long>(g),
              static_cast<long long>(batched), batched_bf16 ? ", batched bf16" : "",
              std::string(kernels::kv_dtype_name(*kv_dtype)).c_str());
  std::printf("%-14s %10s %8s %12s %12s\n", "max_num_seqs", "seconds", "steps", "gen tok/s", "mean TTFT s");
  Run results[2];
  const int64_t seqs[2] = {c, 1};
  const int runs = arg(7, 1) != 0 ? 2 : 1;
  for (int i = 0; i < runs; ++i) {
    auto r = run(m, t, c, seqs[i], p, g, threads, batched, step_budget_ms, batched_bf16, *kv_dtype, *isa, f32_matmul);
    if (!r.is_ok()) {
      std::fprintf(stderr, "%s\n", r.status().message().c_str());
      return 1;
    }
    results[i] = *r;
    std::printf("%-14lld %10.3f %8lld %12.1f %12.3f\n", static_cast<long long>(seqs[i]), r->seconds,
                static_cast<long long>(r->steps), r->tokens_per_s, r->mean_ttft_s);
  }
  if (runs == 2) std::printf("batched / one at a time: %.2fx\n", results[0].tokens_per_s / results[1].tokens_per_s);
  return 0;
}
