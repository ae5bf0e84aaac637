// The real thing in-process: stories260K -> Engine -> ServingEngine (continuous batching, its own
// loop thread) -> HttpServer on a free loopback port, wired as `pagoda serve` wires them. Plus
// helpers to run the openai npm client scripts (tests/npm/openai-client) against it.
#pragma once

#include <sys/wait.h>

#include <atomic>
#include <cstdio>
#include <filesystem>
#include <string>

#include "shell.h"
#include "core/clock.h"
#include "engine/engine.h"
#include "engine/serving.h"
#include "events/kv_event_publisher.h"
#include "server_fixture.h"

namespace pagoda::testing {

struct ScriptRun {
  int exit_code = -1;
  std::string output;  // stdout and stderr
  std::string last_line;
};

inline std::string npm_dir() { return std::string(PAGODA_SOURCE_DIR) + "/tests/npm/openai-client"; }

// node tests/npm/openai-client/<script> URL [args]. The openai package must be installed (npm ci,
// as scripts/install_deps.sh does): a missing one fails the test.
inline ScriptRun run_node(const std::string& script, const std::string& args) {
  ScriptRun run;
  if (!std::filesystem::exists(npm_dir() + "/node_modules/openai/package.json")) {
    run.output = "the openai npm package is missing: run `npm ci` in " + npm_dir() + " (scripts/install_deps.sh does)";
    return run;
  }
  const ShellRun shell = run_shell("cd " + npm_dir() + " && node " + script + " " + args + " 2>&1");
  run.output = shell.out;
  run.exit_code = shell.exit_code;
  std::string trimmed = run.output;
  while (!trimmed.empty() && trimmed.back() == '\n') trimmed.pop_back();
  run.last_line = trimmed.substr(trimmed.rfind('\n') == std::string::npos ? 0 : trimmed.rfind('\n') + 1);
  return run;
}

// The steady clock, plus an offset a test can jump forward (pin expiry) from any thread.
class AdvanceableClock final : public Clock {
 public:
  int64_t now_ns() const override { return steady_.now_ns() + offset_ns_.load(); }
  void advance_ns(int64_t ns) { offset_ns_ += ns; }

 private:
  SteadyClock steady_;
  std::atomic<int64_t> offset_ns_{0};
};

class RealServerTest : public ::testing::Test {
 protected:
  static constexpr int64_t kContext = 512;  // stories260K's trained length

  void SetUp() override {
    auto file = model::GgufFile::read(stories_dir() + "/stories260K.gguf");
    ASSERT_TRUE(file.is_ok()) << file.status().message();
    auto vocab = model::vocab_from_gguf(*file);
    ASSERT_TRUE(vocab.is_ok());
    auto tok = model::Tokenizer::create(std::move(vocab).value());
    ASSERT_TRUE(tok.is_ok());
    tokenizer_ = std::make_shared<const model::Tokenizer>(std::move(tok).value());
    auto model = model::LlamaModel::load(std::move(file).value());
    ASSERT_TRUE(model.is_ok()) << model.status().message();
    engine::EngineConfig config;
    config.num_threads = 1;
    config.max_context = kContext;
    config.kv_cache_bytes = 4 << 20;
    configure_engine(config);
    auto eng = engine::Engine::create(std::move(model).value(), config, clock_, logger_);
    ASSERT_TRUE(eng.is_ok()) << eng.status().message();
    attach_tiers(**eng);
    if (kv_events_) {  // as `pagoda serve --kv-events-config` wires them
      events::KvEventsConfig ec;
      ec.enable_kv_cache_events = true;
      ec.publisher = "zmq";
      ec.endpoint = "tcp://127.0.0.1:*";
      ec.replay_endpoint = "tcp://127.0.0.1:*";
      auto publisher = events::KvEventPublisher::create(ec, [] { return 1700000000.0; }, logger_);
      ASSERT_TRUE(publisher.is_ok()) << publisher.status().message();
      publisher_ = std::move(publisher).value();
      (*eng)->block_manager().add_listener(publisher_.get());
    }
    const int64_t token_capacity = (*eng)->kv_plan().token_capacity;
    engine::ServingConfig serving_config;
    serving_config.max_num_seqs = 16;
    configure_serving(serving_config);
    auto serving = engine::ServingEngine::create(std::move(eng).value(), tokenizer_, serving_config);
    ASSERT_TRUE(serving.is_ok()) << serving.status().message();
    serving_ = std::move(serving).value();
    serving_->start();

    server::ServerConfig sc;
    sc.port = 0;
    sc.model_name = "stories260K";
    sc.limits.vocab_size = tokenizer_->vocab_size();
    sc.limits.max_context = kContext;
    sc.limits.max_total_tokens = token_capacity;
    sc.end_of_text_ids = {tokenizer_->eos_id(), tokenizer_->bos_id()};  // as `pagoda serve`
    sc.unix_time = [] { return int64_t{1700000000}; };
    sc.kv_events = publisher_.get();
    sc.instance_id = "test-instance";
    configure(sc);
    server::ChatTemplate chat(chat_family(), "<s>", "</s>");
    chat.set_syntax(model::tool_syntax_for(chat_family(), "", false), model::ReasoningSyntax::kNone);  // as `pagoda serve`
    server_ = std::make_unique<server::HttpServer>(*serving_, std::move(chat), sc, logger_);
    auto port = server_->bind();
    ASSERT_TRUE(port.is_ok()) << port.status().message();
    port_ = *port;
    url_ = "http://127.0.0.1:" + std::to_string(port_);
    thread_ = std::thread([this] { server_->listen(); });
    client_ = std::make_unique<httplib::Client>("127.0.0.1", port_);
    client_->set_read_timeout(120, 0);
  }

  void TearDown() override {
    if (server_ != nullptr) server_->stop();
    if (thread_.joinable()) thread_.join();
    if (serving_ != nullptr) serving_->shutdown(false);
  }

  // Fixtures derived from this one change the server's config here (API keys, ...).
  virtual void configure(server::ServerConfig&) {}
  virtual void configure_serving(engine::ServingConfig&) {}
  virtual void configure_engine(engine::EngineConfig&) {}
  virtual void attach_tiers(engine::Engine&) {}  // KV tiers below the pool (none by default)
  virtual server::ChatFamily chat_family() const { return server::ChatFamily::kChatML; }

  // No request running or waiting, no block held: everything a request took was given back.
  void expect_idle_and_intact() {
    serving_->check_integrity();
    const engine::ServingMetrics m = serving_->metrics();
    EXPECT_EQ(m.running, 0);
    EXPECT_EQ(m.waiting, 0);
    EXPECT_EQ(m.kv_blocks_in_use, 0) << "leaked blocks";
    EXPECT_EQ(m.kv_blocks_in_use + m.kv_blocks_cached + m.kv_blocks_free, m.kv_blocks_total);
  }

  httplib::Result post(const std::string& path, const nlohmann::json& body) {
    return client_->Post(path.c_str(), body.dump(), "application/json");
  }

  AdvanceableClock clock_;
  Logger logger_{LogLevel::kWarn, stderr};
  std::shared_ptr<const model::Tokenizer> tokenizer_;
  bool kv_events_ = false;  // set before SetUp: publish KV events (the publisher outlives the engine)
  std::unique_ptr<events::KvEventPublisher> publisher_;
  std::unique_ptr<engine::ServingEngine> serving_;
  std::unique_ptr<server::HttpServer> server_;
  std::thread thread_;
  int port_ = 0;
  std::string url_;
  std::unique_ptr<httplib::Client> client_;
};

}  // namespace pagoda::testing
