// pagoda router: an OpenAI-compatible front over several `pagoda serve --kv-events-config ...`
// workers that places each request on the worker whose KV cache holds most of its prompt
// (router/router_server.h). It loads only the model's tokenizer and chat template (-m: the
// model file, a vocab-only GGUF, or a Hugging Face folder), so it tokenizes and hashes prompts
// exactly as the workers do.
//
// SIGINT/SIGTERM stop it: it stops taking connections and exits 0.
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <thread>

#include "router/router_server.h"
#include "tools/chat_template_choice.h"
#include "tools/commands.h"
#include "tools/model_source.h"

namespace pagoda::tools {

namespace {

struct RouterOptions {
  std::string model_path;
  std::string tokenizer_path;
  std::vector<std::string> workers;
  std::vector<std::string> prefill, decode;  // P/D disaggregation
  std::string host = "127.0.0.1";
  int port = 8000;
  std::string policy = "kv-aware";
  double overlap_weight = 1.0;
  int max_retries = 2;
  double health_interval_s = 1.0;
  double request_timeout_s = 600;
  std::string chat_template;
  std::string worker_api_key;
  std::vector<std::string> api_keys;
  bool no_dashboard = false;
  int http_threads = 256;
  int64_t max_body_bytes = 8 << 20;
  bool verbose = false;
};

int run_router(const RouterOptions& o, const Clock& clock, Logger& logger) {
  logger.set_level(o.verbose ? LogLevel::kDebug : LogLevel::kInfo);
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);  // inherited by every thread started below
  signal(SIGPIPE, SIG_IGN);

  router::RouterConfig config;
  const auto policy = router::routing_policy_from_name(o.policy);
  if (!policy) return fail(Status::invalid_argument("--policy must be kv-aware, round-robin or least-load"));
  config.policy = *policy;
  config.host = o.host;
  config.port = o.port;
  config.overlap_weight = o.overlap_weight;
  config.max_retries = o.max_retries;
  config.health_interval_s = o.health_interval_s;
  config.request_timeout_s = o.request_timeout_s;
  config.worker_api_key = o.worker_api_key;
  config.api_keys = o.api_keys;
  config.dashboard = !o.no_dashboard;
  config.http_threads = o.http_threads;
  config.max_body_bytes = static_cast<size_t>(o.max_body_bytes);
  std::vector<router::WorkerAddress> workers;
  std::vector<std::string> urls = o.workers;
  urls.insert(urls.end(), o.decode.begin(), o.decode.end());  // decode workers are the routed ones
  if (urls.empty()) return fail(Status::invalid_argument("give --worker URL (or --prefill URL --decode URL)"));
  if (!o.prefill.empty() && o.decode.empty()) return fail(Status::invalid_argument("--prefill needs --decode URL"));
  for (const std::string& url : urls) {
    auto a = router::parse_worker_url(url);
    if (!a.is_ok()) return fail(a.status());
    workers.push_back(*a);
  }
  for (const std::string& url : o.prefill) {
    auto a = router::parse_worker_url(url);
    if (!a.is_ok()) return fail(a.status());
    config.prefill_workers.push_back(*a);
  }
  auto loaded = load_tokenizer(o.model_path, o.tokenizer_path);
  if (!loaded.is_ok()) return fail(loaded.status());
  std::shared_ptr<const model::Tokenizer> tokenizer = std::move(loaded->tokenizer);
  auto chat_template = choose_chat_template(o.chat_template, loaded->chat_template, *tokenizer, logger);
  if (!chat_template.is_ok()) return fail(chat_template.status());

  router::RouterServer router(config, std::move(workers), tokenizer, std::move(chat_template).value(), clock, logger);
  auto port = router.bind();
  if (!port.is_ok()) return fail(port.status());
  router.start();
  std::printf("pagoda router: %s policy over %zu workers at http://%s:%d\n", router::routing_policy_name(config.policy),
              urls.size(), o.host.c_str(), *port);
  if (!o.prefill.empty()) {
    std::printf("  P/D: prompts prefilled on %zu prefill workers, decoded on %zu decode workers\n", o.prefill.size(),
                o.decode.size());
  }
  if (config.dashboard) std::printf("  dashboard: http://%s:%d/dashboard   (workers, routing, live)\n", o.host.c_str(), *port);
  std::fflush(stdout);
  std::atomic<bool> stopping{false};
  std::thread listener([&] {
    router.listen();
    // Stopped on its own: wake the main thread (not after a signal: a second SIGTERM would stay
    // pending and end the process with 143 instead of 0).
    if (!stopping) kill(getpid(), SIGTERM);
  });
  int signal_number = 0;
  while (sigwait(&signals, &signal_number) != 0) {
  }
  logger.info("pagoda router: stopping");
  stopping = true;
  router.stop();
  listener.join();
  return 0;
}

}  // namespace

void register_router(CLI::App& app, const Clock& clock, Logger& logger, int& exit_code) {
  auto o = std::make_shared<RouterOptions>();
  CLI::App* cmd = app.add_subcommand("router", "KV-aware OpenAI-compatible router over `pagoda serve` workers");
  cmd->add_option("-m,--model", o->model_path,
                  "the workers' model (GGUF, vocab-only GGUF, llama2.c checkpoint or Hugging Face folder): its "
                  "tokenizer and chat template (default: the built-in model)");
  cmd->add_option("--tokenizer", o->tokenizer_path, "tokenizer.bin for a llama2.c checkpoint");
  cmd->add_option("--worker", o->workers, "a worker's base URL, http://HOST:PORT (repeatable)");
  cmd->add_option("--prefill", o->prefill,
                  "P/D: a `pagoda serve --role prefill` worker's URL (repeatable); needs --decode");
  cmd->add_option("--decode", o->decode,
                  "P/D: a `pagoda serve --role decode` worker's URL (repeatable); requests stream from these");
  cmd->add_option("--host", o->host, "address to listen on (default 127.0.0.1)");
  cmd->add_option("--port", o->port, "TCP port (0: any free port)")->check(CLI::Range(0, 65535));
  cmd->add_option("--policy", o->policy, "kv-aware | round-robin | least-load")
      ->check(CLI::IsMember({"kv-aware", "round-robin", "least-load"}))
      ->capture_default_str();
  cmd->add_option("--overlap-weight", o->overlap_weight,
                  "kv-aware: weight of a request's uncached prefill blocks against decode blocks (0: load only)")
      ->check(CLI::Range(0.0, 1000.0))
      ->capture_default_str();
  cmd->add_option("--max-retries", o->max_retries, "other workers tried when one fails before streaming")
      ->check(CLI::Range(0, 64))
      ->capture_default_str();
  cmd->add_option("--health-interval", o->health_interval_s, "seconds between health checks of each worker")
      ->check(CLI::Range(0.05, 3600.0))
      ->capture_default_str();
  cmd->add_option("--request-timeout", o->request_timeout_s, "seconds a worker may stay silent mid-request")
      ->check(CLI::Range(0.1, 86400.0));
  cmd->add_option("--chat-template", o->chat_template,
                  "chat template family as the workers use it (default: from the model, else chatml)");
  cmd->add_option("--worker-api-key", o->worker_api_key,
                  "the key the router presents on its own calls to workers started with --api-key");
  cmd->add_option("--api-key", o->api_keys,
                  "accept only clients with \"Authorization: Bearer KEY\" on /v1 and /router routes (repeatable; "
                  "the key is forwarded, so give the workers the same keys)");
  cmd->add_flag("--no-dashboard", o->no_dashboard, "do not serve the live dashboard at /dashboard");
  cmd->add_option("--http-threads", o->http_threads, "client connections served at once; one more gets 503 \"too many connections\"")->check(CLI::Range(1, 4096));
  cmd->add_option("--max-body", o->max_body_bytes, "largest request body in bytes (413 beyond)")
      ->check(CLI::Range(int64_t{1024}, int64_t{1} << 31));
  cmd->add_flag("-v,--verbose", o->verbose, "debug logging: each routing decision with the load and overlap of every worker");
  cmd->callback([o, &clock, &logger, &exit_code] { exit_code = run_router(*o, clock, logger); });
}

}  // namespace pagoda::tools
