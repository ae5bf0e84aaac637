// pagoda serve: the OpenAI-compatible HTTP server over a continuous-batching ServingEngine.
//
// Wiring: model + engine (EngineOptions) -> ServingEngine (its own loop thread) -> HttpServer
// (httplib's thread pool). SIGINT/SIGTERM are blocked in every thread and taken by sigwait() on
// the main thread: the server stops taking work (503, /health says draining), in-flight requests
// get up to --drain-timeout seconds to finish, what is left is aborted, then the engine and the
// server shut down and the process exits 0.
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <random>
#include <thread>

#include "engine/pd_coordinator.h"
#include "engine/pinning.h"
#include "engine/serving.h"
#include "model/text/prompt_tokens.h"
#include "events/kv_event_publisher.h"
#include "server/http_server.h"
#include "tools/chat_template_choice.h"
#include "tools/commands.h"

namespace pagoda::tools {

namespace {

double unix_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

struct ServeOptions {
  EngineOptions engine;
  std::string host = "127.0.0.1";
  int port = 8080;
  std::vector<std::string> api_keys;
  bool salt_per_api_key = false;
  std::string chat_template;  // family name; "" = from the model, else the fallback
  std::string tool_parser;    // "" / auto: from the template
  std::string reasoning_parser;
  std::string model_name;     // "" = the file stem, else general.name
  int64_t max_num_seqs = 0;            // 0: 64, at most the tokens per step
  int64_t max_num_batched_tokens = 0;  // 0: -b (the rows of one forward pass)
  double step_budget_ms = 100;
  int64_t max_waiting = 256;
  int max_choices = 16;
  int http_threads = 512;
  int http_read_timeout = 5;
  int64_t max_body_bytes = 8 << 20;
  double drain_timeout_s = 30;
  std::string kv_events_config;  // vLLM's --kv-events-config JSON; "" = no events
  bool no_dashboard = false;
  // P/D disaggregation (engine/pd_coordinator.h).
  std::string role = "both";
  int kv_transfer_port = -1;     // -1: no KV transfer agent unless the role needs one; 0: any port
  double kv_lease_s = 30;
  double kv_transfer_timeout_s = 10;
  std::string ucx_tls;           // "" : UCX_TLS from the environment, else tcp,self on lo
  std::string ucx_net_devices;
  double max_pinned_share = 0.5;         // of the pool that pins may hold (POST /v1/cache/pin)
  std::vector<std::string> pin_prompts;  // files whose text is pinned at start-up
};

// The UCX settings of the KV transfer: flags first, then the environment (UCX reads UCX_* itself),
// else loopback TCP, which works in every container (sm needs ptrace rights or a shared /dev/shm).
std::vector<std::pair<std::string, std::string>> ucx_options(const ServeOptions& o) {
  std::vector<std::pair<std::string, std::string>> out;
  const bool env_tls = std::getenv("UCX_TLS") != nullptr;
  if (!o.ucx_tls.empty()) out.emplace_back("TLS", o.ucx_tls);
  else if (!env_tls) out.emplace_back("TLS", "tcp,self");
  if (!o.ucx_net_devices.empty()) out.emplace_back("NET_DEVICES", o.ucx_net_devices);
  else if (!env_tls && std::getenv("UCX_NET_DEVICES") == nullptr && o.ucx_tls.empty()) out.emplace_back("NET_DEVICES", "lo");
  return out;
}

std::string served_name(const ServeOptions& o, const engine::Engine& eng) {
  if (!o.model_name.empty()) return o.model_name;
  if (!o.engine.model_path.empty()) {  // the file says which model it is better than general.name ("llama")
    std::filesystem::path path(o.engine.model_path);
    if (!path.has_filename()) path = path.parent_path();  // a folder given as "dir/"
    return path.stem().string();
  }
  if (!eng.model().config().name.empty()) return eng.model().config().name;
  return "default";
}

std::string describe_model(const engine::Engine& eng) {
  const model::ModelConfig& mc = eng.model().config();
  char buf[160];
  std::snprintf(buf, sizeof(buf), "%s, %lld layers, width %lld, vocab %lld, context %lld", mc.arch_name.c_str(),
                static_cast<long long>(mc.n_layer), static_cast<long long>(mc.n_embd),
                static_cast<long long>(mc.n_vocab), static_cast<long long>(eng.max_context()));
  return buf;
}

// What a new user needs on the first screen: which model this is (and that the built-in one
// speaks noise), how to serve a real one, a request to try, and where the dashboard is.
void print_welcome(const ServeOptions& o, const server::ServerConfig& config, const std::string& description,
                   const std::string& url) {
  std::printf("pagoda serve: %s at %s\n", config.model_name.c_str(), url.c_str());
  std::printf("  model: %s\n", description.c_str());
  if (o.engine.model_path.empty()) {
    std::printf("  this is the BUILT-IN model: random weights, so its replies are noise (it needs no download).\n"
                "  serve a real one:  pagoda serve -m MODEL.gguf   or   pagoda serve -m HF_FOLDER/  (config.json +\n"
                "  safetensors + tokenizer.json), e.g. a Llama, Mistral, Qwen2 or Qwen3 GGUF from llama.cpp's converter\n");
  }
  std::printf("  try: curl -s %s/v1/completions -H 'Content-Type: application/json'%s -d "
              "'{\"prompt\": \"Once upon a time\", \"max_tokens\": 32}'\n",
              url.c_str(), o.api_keys.empty() ? "" : " -H 'Authorization: Bearer YOUR_KEY'");
  if (config.dashboard) std::printf("  dashboard: %s/dashboard   (KV cache, live)\n", url.c_str());
  std::printf("  why a prompt misses the cache: pagoda explain --url %s \"your prompt\"\n", url.c_str());
  std::fflush(stdout);
}

// Waits for SIGINT/SIGTERM (blocked in every thread since before any was started).
int wait_for_signal(const sigset_t& signals) {
  int signal_number = 0;
  while (sigwait(&signals, &signal_number) != 0) {
  }
  return signal_number;
}

// Gives in-flight work up to timeout_s to finish; true when every request did. KV tier writes
// (write-through puts in flight or kept to retry) get the rest of the same time, so a SIGTERM
// loses no committed block; a timeout with writes left is logged with their count.
bool drain(const engine::ServingEngine& serving, double timeout_s, const Logger& logger) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  bool requests_done = false;
  int64_t writes = 0;
  for (;;) {
    const engine::ServingMetrics m = serving.metrics();
    requests_done = m.running == 0 && m.waiting == 0;
    writes = m.tier_writes_pending;
    if ((requests_done && writes == 0) || std::chrono::steady_clock::now() >= deadline) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (writes > 0) {
    logger.warn("pagoda serve: drain timed out with " + std::to_string(writes) +
                " KV tier writes pending (puts in flight or blocks kept to retry): they may not be stored");
  }
  return requests_done;
}

Result<std::string> read_pin_prompt(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) return Status::invalid_argument("--pin-prompt " + path + ": cannot open it");
  std::string text;
  char buf[65536];
  size_t n = 0;
  while ((n = std::fread(buf, 1, sizeof(buf), f)) > 0 && text.size() < (size_t{64} << 20)) text.append(buf, n);
  std::fclose(f);
  if (text.size() >= (size_t{64} << 20)) return Status::invalid_argument("--pin-prompt " + path + ": larger than 64 MiB");
  if (text.empty()) return Status::invalid_argument("--pin-prompt " + path + ": the file is empty");
  return text;
}

// --pin-prompt: each file's text, tokenized as a completion prompt, computed and pinned (no ttl,
// no salt) before the server takes requests.
Status pin_at_start(engine::ServingEngine& engine, const model::Tokenizer& tokenizer,
                    const std::vector<std::pair<std::string, std::string>>& files, bool salt_per_api_key,
                    const Logger& logger) {
  engine::CachePinner* pinner = engine.pinner();
  if (pinner == nullptr) return Status::error("--pin-prompt: this engine cannot pin prefixes");
  if (salt_per_api_key) {
    logger.warn("--pin-prompt with --salt-per-api-key: start-up pins are unsalted, so keyed requests do not hit them");
  }
  for (const auto& [path, text] : files) {
    engine::PinRequest request;
    request.prompt = model::encode_prompt(tokenizer, text);
    request.label = path;
    auto pinned = engine::pin_and_wait(*pinner, std::move(request));
    if (!pinned.is_ok()) return pinned.status().with_context("--pin-prompt " + path);
    logger.info("pinned " + path + ": " + std::to_string(pinned->pinned_tokens) + " of its " +
                std::to_string(pinned->prompt_tokens) + " tokens in " + std::to_string(pinned->blocks.size()) +
                " KV blocks (pin-" + std::to_string(pinned->id) + ")");
  }
  return Status::ok();
}

int serve(const ServeOptions& o, const Clock& clock, Logger& logger) {
  logger.set_level(o.engine.verbose ? LogLevel::kDebug : LogLevel::kInfo);
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);  // inherited by every thread started below
  signal(SIGPIPE, SIG_IGN);                       // a client that hangs up is an ordinary event

  events::KvEventsConfig kv_events;
  if (!o.kv_events_config.empty()) {
    auto parsed = events::parse_kv_events_config(o.kv_events_config);
    if (!parsed.is_ok()) return fail(parsed.status());
    kv_events = *parsed;
  }
  std::vector<std::pair<std::string, std::string>> pin_files;  // (path, text): bad files fail before loading
  for (const std::string& path : o.pin_prompts) {
    auto text = read_pin_prompt(path);
    if (!text.is_ok()) return fail(text.status());
    pin_files.emplace_back(path, std::move(text).value());
  }
  auto loaded = load_engine(o.engine, clock, logger);
  if (!loaded.is_ok()) return fail(loaded.status());
  // The publisher outlives the engine that calls it (declared first, destroyed last).
  std::unique_ptr<events::KvEventPublisher> publisher;
  if (kv_events.publishes()) {
    auto created = events::KvEventPublisher::create(kv_events, unix_seconds, logger);
    if (!created.is_ok()) return fail(created.status());
    publisher = std::move(created).value();
    loaded->engine->block_manager().add_listener(publisher.get());
    if (kvcache::TierStack* tiers = loaded->engine->tiers()) tiers->set_event_listener(publisher.get());  // "CPU", "DISK"
    if (!o.engine.no_prefix_cache) {
      logger.info("KV events: publishing on " + publisher->endpoint() +
                  (publisher->replay_endpoint().empty() ? "" : ", replay on " + publisher->replay_endpoint()));
    } else {
      logger.warn("KV events: --no-prefix-cache registers no blocks, so no block events will be published");
    }
  }
  std::shared_ptr<const model::Tokenizer> tokenizer = std::move(loaded->tokenizer);
  const engine::Engine& eng = *loaded->engine;
  // The model's own template: GGUF tokenizer.chat_template, or tokenizer_config.json of an HF folder.
  auto chat_template =
      choose_chat_template(o.chat_template, loaded->chat_template, *tokenizer, logger, o.tool_parser, o.reasoning_parser);
  if (!chat_template.is_ok()) return fail(chat_template.status());

  server::ServerConfig config;
  config.host = o.host;
  config.port = o.port;
  config.api_keys = o.api_keys;
  config.salt_per_api_key = o.salt_per_api_key;
  config.model_name = served_name(o, eng);
  config.limits.vocab_size = tokenizer->vocab_size();
  config.limits.max_context = eng.max_context();
  config.limits.max_choices = o.max_choices;
  // Windowed sequences (StreamingLLM, sliding-window models) hold a bounded window, not their
  // whole length: their budget is the context per choice rather than the pool.
  config.limits.max_total_tokens = eng.windowed() ? o.max_choices * eng.max_context() : eng.kv_plan().token_capacity;
  // End of text: EOS, and BOS (llama2.c-trained models mark a new story with BOS), as `run` does.
  for (int32_t id : {tokenizer->eos_id(), tokenizer->bos_id()}) {
    if (id >= 0) config.end_of_text_ids.push_back(id);
  }
  config.end_of_text_ids.insert(config.end_of_text_ids.end(), loaded->stop_token_ids.begin(),
                                loaded->stop_token_ids.end());  // generation_config.json's EOS list
  config.dashboard = !o.no_dashboard;
  config.max_body_bytes = static_cast<size_t>(o.max_body_bytes);
  config.http_threads = o.http_threads;
  config.read_timeout_s = o.http_read_timeout;
  config.seed = std::random_device{}();
  config.kv_events = publisher.get();
  {
    std::random_device rd;
    char id[17];
    std::snprintf(id, sizeof(id), "%08x%08x", rd(), rd());
    config.instance_id = id;
  }
  config.unix_time = [] {
    return static_cast<int64_t>(std::chrono::duration_cast<std::chrono::seconds>(
                                    std::chrono::system_clock::now().time_since_epoch())
                                    .count());
  };

  engine::ServingConfig serving_config;
  // Honoured as given or refused with the limit named; never clamped behind the user's back.
  const int64_t rows = eng.max_batch_tokens();
  if (o.max_num_batched_tokens > rows) {
    return fail(Status::invalid_argument("--max-num-batched-tokens " + std::to_string(o.max_num_batched_tokens) +
                                         " is more than one forward pass takes (-b/--batch-size " +
                                         std::to_string(rows) + "): raise -b or lower it"));
  }
  serving_config.max_num_batched_tokens = o.max_num_batched_tokens > 0 ? o.max_num_batched_tokens : rows;
  if (o.max_num_seqs > serving_config.max_num_batched_tokens) {
    return fail(Status::invalid_argument(
        "--max-num-seqs " + std::to_string(o.max_num_seqs) + " is more than the tokens per step (" +
        std::to_string(serving_config.max_num_batched_tokens) +
        ", --max-num-batched-tokens / -b): every running sequence needs a token of each step"));
  }
  serving_config.max_num_seqs =
      o.max_num_seqs > 0 ? o.max_num_seqs : std::min<int64_t>(64, serving_config.max_num_batched_tokens);
  serving_config.step_budget_ms = o.step_budget_ms;
  serving_config.max_waiting = o.max_waiting;
  serving_config.max_pinned_share = o.max_pinned_share;
  serving_config.preemption = *engine::preemption_mode_from_name(o.engine.preemption);  // checked by the flag
  if (const store::RedisTier* remote = find_kv_remote_tier(eng)) {  // --kv-remote (tools/kv_remote.h)
    config.extra_metrics = [remote](std::string& out) { append_kv_remote_metrics(*remote, out); };
  }
  const std::string eng_description = describe_model(eng);
  auto serving = engine::ServingEngine::create(std::move(loaded->engine), tokenizer, serving_config);
  if (!serving.is_ok()) return fail(serving.status());
  engine::ServingEngine& engine = **serving;

  const auto role = engine::pd_role_from_name(o.role);
  if (!role) return fail(Status::invalid_argument("--role must be prefill, decode or both"));
  std::unique_ptr<engine::PdCoordinator> pd;  // destroyed before the engine (it pins blocks)
  if (*role != engine::PdRole::kBoth || o.kv_transfer_port >= 0) {
    engine::PdConfig pd_config;
    pd_config.role = *role;
    pd_config.engine_id = config.instance_id;
    pd_config.lease_s = o.kv_lease_s;
    pd_config.transfer_timeout_s = o.kv_transfer_timeout_s;
    pd_config.ucx.host = o.host;
    pd_config.ucx.port = std::max(0, o.kv_transfer_port);
    pd_config.ucx.ucx_options = ucx_options(o);
    auto created = engine::PdCoordinator::create(engine, pd_config, clock, logger);
    if (!created.is_ok()) return fail(created.status());
    pd = std::move(created).value();
    std::string tls;
    for (const auto& [k, v] : pd_config.ucx.ucx_options) tls += " UCX_" + k + "=" + v;
    logger.info(std::string("P/D: role ") + engine::pd_role_name(*role) + ", KV transfer (UCX) on " + o.host + ":" +
                std::to_string(pd->transfer_port()) + (tls.empty() ? " (UCX settings from the environment)" : tls) +
                ", lease " + std::to_string(o.kv_lease_s) + " s");
  }
  config.pd = pd.get();

  server::HttpServer http(engine, std::move(chat_template).value(), config, logger);
  auto port = http.bind();
  if (!port.is_ok()) return fail(port.status());
  engine.start();
  if (!pin_files.empty()) {
    if (Status pinned = pin_at_start(engine, *tokenizer, pin_files, o.salt_per_api_key, logger); !pinned.is_ok()) {
      engine.shutdown(false);
      return fail(pinned);
    }
  }
  const std::string url = "http://" + o.host + ":" + std::to_string(*port);
  print_welcome(o, config, eng_description, url);

  std::thread listener([&] {
    http.listen();
    if (!http.draining()) kill(getpid(), SIGTERM);  // stopped on its own: wake the main thread
  });
  const int signal_number = wait_for_signal(signals);
  char timeout[32];
  std::snprintf(timeout, sizeof(timeout), "%g", o.drain_timeout_s);
  logger.info(std::string("pagoda serve: ") + (signal_number == SIGINT ? "SIGINT" : "SIGTERM") +
              ", draining (up to " + timeout + " s)");
  http.begin_drain();
  const bool drained = drain(engine, o.drain_timeout_s, logger);
  if (!drained) logger.warn("pagoda serve: drain timed out; aborting the requests still running");
  engine.shutdown(drained);
  http.stop();
  listener.join();
  pd.reset();  // ends the leases (drops their pins) before the engine goes
  if (publisher != nullptr) publisher->stop();  // sends what the last steps announced
  logger.info("pagoda serve: stopped");
  return 0;
}

}  // namespace

void register_serve(CLI::App& app, const Clock& clock, Logger& logger, int& exit_code) {
  auto options = std::make_shared<ServeOptions>();
  CLI::App* cmd = app.add_subcommand("serve", "OpenAI-compatible HTTP server (continuous batching)");
  add_engine_options(*cmd, options->engine);
  cmd->add_option("--host", options->host, "address to listen on (default 127.0.0.1: this machine only)");
  cmd->add_option("--port", options->port, "TCP port (0: any free port)")->check(CLI::Range(0, 65535));
  cmd->add_option("--api-key", options->api_keys, "accept only requests with \"Authorization: Bearer KEY\" (repeatable)");
  cmd->add_flag("--salt-per-api-key", options->salt_per_api_key,
                "separate the prefix cache of each API key (no cross-tenant prefix-timing side channel)");
  cmd->add_option("--chat-template", options->chat_template,
                  "chat template family: " + server::chat_family_names() + " (default: from the model, else chatml)");
  cmd->add_option("--tool-parser", options->tool_parser,
                  "tool-call syntax of replies: auto (from the chat template), " + model::tool_syntax_names());
  cmd->add_option("--reasoning-parser", options->reasoning_parser,
                  "reasoning in replies: auto (think when the template has <think>), think, none");
  cmd->add_option("--model-name", options->model_name, "the model's name in the API (default: the file stem; the built-in model: its general.name)");
  cmd->add_option("--max-num-seqs", options->max_num_seqs,
                  "sequences per engine step (default 64, at most --max-num-batched-tokens; more is refused)")
      ->check(CLI::Range(1, 4096));
  cmd->add_option("--http-read-timeout", options->http_read_timeout,
                  "seconds a connection may stay silent (idle, or mid-request) before it is closed")
      ->check(CLI::Range(1, 3600));
  cmd->add_option("--max-num-batched-tokens", options->max_num_batched_tokens,
                  "tokens per engine step (default and most: -b, the rows of one forward pass; more is refused)")
      ->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--step-budget-ms", options->step_budget_ms,
                  "while requests decode, cut prefill chunks so that a step's estimated time stays within this "
                  "(the decoders' inter-token latency); 0: off, steps only capped by --max-num-batched-tokens")
      ->check(CLI::Range(0.0, 3.6e6));
  cmd->add_option("--max-waiting", options->max_waiting, "queued requests beyond which the server answers 429")
      ->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--max-choices", options->max_choices, "n x prompts per request")->check(CLI::Range(1, 1024));
  cmd->add_option("--http-threads", options->http_threads, "connections served at once; one more gets 503 \"too many connections\"")->check(CLI::Range(1, 4096));
  cmd->add_option("--max-body", options->max_body_bytes, "largest request body in bytes (413 beyond)")
      ->check(CLI::Range(int64_t{1024}, int64_t{1} << 31));
  cmd->add_option("--drain-timeout", options->drain_timeout_s, "seconds in-flight requests get to finish on SIGTERM")
      ->check(CLI::Range(0.0, 3600.0));
  cmd->add_option("--kv-events-config", options->kv_events_config,
                  "KV cache events over ZeroMQ, vLLM's JSON: {\"enable_kv_cache_events\":true,\"endpoint\":\"tcp://*:5557\","
                  "\"replay_endpoint\":\"tcp://*:5558\",\"topic\":\"\"} (also publisher, buffer_steps, hwm, "
                  "max_queue_size; Pagoda's \"encoding\": \"map\" | \"array\")");
  cmd->add_flag("--no-dashboard", options->no_dashboard, "do not serve the live dashboard at /dashboard");
  cmd->add_option("--role", options->role,
                  "P/D disaggregation: prefill (compute prompts, lend their KV), decode (pull the KV, generate) or both")
      ->check(CLI::IsMember({"prefill", "decode", "both"}))
      ->capture_default_str();
  cmd->add_option("--kv-transfer-port", options->kv_transfer_port,
                  "UCX listener port of the KV transfer (0: any; default: any when --role is prefill or decode)")
      ->check(CLI::Range(0, 65535));
  cmd->add_option("--kv-lease", options->kv_lease_s, "seconds a prefill worker holds lent KV blocks for the decode side")
      ->check(CLI::Range(0.001, 86400.0))
      ->capture_default_str();
  cmd->add_option("--kv-transfer-timeout", options->kv_transfer_timeout_s,
                  "seconds a decode worker waits for one KV pull before computing the prompt itself")
      ->check(CLI::Range(0.001, 3600.0))
      ->capture_default_str();
  cmd->add_option("--ucx-tls", options->ucx_tls,
                  "UCX transports of the KV transfer (UCX_TLS), e.g. tcp,self or sm,self (default: $UCX_TLS, else tcp,self)");
  cmd->add_option("--ucx-net-devices", options->ucx_net_devices,
                  "UCX_NET_DEVICES for tcp (default: $UCX_NET_DEVICES, else lo when no transport is given)");
  cmd->add_option("--max-pinned-share", options->max_pinned_share,
                  "share of the KV pool's blocks that pins (POST /v1/cache/pin, --pin-prompt) may hold; 0: no pinning")
      ->check(CLI::Range(0.0, 0.95));
  cmd->add_option("--pin-prompt", options->pin_prompts,
                  "pin this file's text (a completion prompt) in the KV pool at start-up, until unpinned (repeatable)");
  cmd->callback([options, &clock, &logger, &exit_code] { exit_code = serve(*options, clock, logger); });
}

}  // namespace pagoda::tools
