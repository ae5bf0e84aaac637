// pagoda explain: asks a running server why a prompt would (not) hit its prefix cache
// (POST /v1/kv/explain) and prints the answer for a person, or the JSON with --json. Nothing is
// run on the server: no tokens, no recency, no counters.
#include <httplib.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "tools/commands.h"
#include "tools/serve_bench_client.h"

namespace pagoda::tools {

namespace {

using nlohmann::json;

struct ExplainOptions {
  std::string url = "http://127.0.0.1:8080";
  std::string model;      // the served model's name ("" = whatever it serves)
  std::string prompt;
  std::string file;
  std::string salt;
  std::string api_key;    // else $PAGODA_API_KEY
  bool chat = false;
  bool json = false;
};

void print_explanation(const json& e) {
  const int64_t prompt = e.value("prompt_tokens", 0), hit = e.value("hit_tokens", 0);
  const int64_t B = e.value("block_size", 16);
  std::printf("prompt:  %lld tokens; at most %lld can come from the cache (full blocks of %lld before the last token)\n",
              static_cast<long long>(prompt), static_cast<long long>(e.value("cacheable_tokens", 0)),
              static_cast<long long>(B));
  std::string where;
  for (const json& t : e["tiers"]) {
    if (t.value("tokens", 0) > 0) where += " " + t.value("tier", std::string()) + " " + std::to_string(t.value("tokens", 0));
  }
  std::printf("hit:     %lld tokens%s%s; compute %lld\n", static_cast<long long>(hit), where.empty() ? "" : " from",
              where.c_str(), static_cast<long long>(e.value("compute_tokens", 0)));
  std::printf("cause:   %s\n", e.value("cause", std::string("?")).c_str());
  std::printf("         %s\n", e.value("detail", std::string()).c_str());
  if (e.contains("diverge_token")) std::printf("diverges at token %lld\n", static_cast<long long>(e["diverge_token"].get<int64_t>()));
  for (const json& b : e["blocks"]) {
    std::printf("  block %3lld  tokens %5lld..%-5lld  %s  %s\n", static_cast<long long>(b.value("index", 0)),
                static_cast<long long>(b.value("index", 0) * B), static_cast<long long>((b.value("index", 0) + 1) * B),
                b.value("hash", std::string()).c_str(), b.value("where", std::string()).c_str());
  }
}

int explain(const ExplainOptions& o) {
  auto url = parse_server_url(o.url);
  if (!url.is_ok()) return fail(url.status());
  std::string prompt = o.prompt;
  if (!o.file.empty()) {
    std::ifstream in(o.file, std::ios::binary);
    if (!in) return fail(Status::error("cannot read " + o.file));
    std::stringstream ss;
    ss << in.rdbuf();
    prompt = ss.str();
  }
  json body = o.chat ? json{{"messages", json::array({{{"role", "user"}, {"content", prompt}}})}} : json{{"prompt", prompt}};
  if (!o.model.empty()) body["model"] = o.model;
  if (!o.salt.empty()) body["cache_salt"] = o.salt;
  httplib::Client client(url->origin);
  client.set_read_timeout(60, 0);
  httplib::Headers headers;
  std::string key = o.api_key;
  if (key.empty() && std::getenv("PAGODA_API_KEY") != nullptr) key = std::getenv("PAGODA_API_KEY");
  if (!key.empty()) headers.emplace("Authorization", "Bearer " + key);
  auto res = client.Post(url->prefix + "/v1/kv/explain", headers, body.dump(), "application/json");
  if (!res) return fail(Status::unavailable("no answer from " + o.url + ": " + httplib::to_string(res.error())));
  const json answer = json::parse(res->body, nullptr, false);
  if (res->status != 200) {
    const bool has_message = !answer.is_discarded() && answer.is_object() && answer.contains("error") &&
                             answer["error"].is_object() && answer["error"].contains("message") &&
                             answer["error"]["message"].is_string();
    const std::string message = has_message ? answer["error"]["message"].get<std::string>() : res->body;
    return fail(Status::error("HTTP " + std::to_string(res->status) + ": " + message));
  }
  if (answer.is_discarded()) return fail(Status::error("the server's answer is not JSON"));
  if (o.json) {
    std::printf("%s\n", answer.dump(2).c_str());
  } else {
    try {  // the answer comes from whatever listens at --url: a field of another type is an error, not a crash
      print_explanation(answer);
    } catch (const json::exception& e) {
      return fail(Status::error(std::string("the server's answer is not an explanation: ") + e.what()));
    }
  }
  return 0;
}

}  // namespace

void register_explain(CLI::App& app, int& exit_code) {
  auto o = std::make_shared<ExplainOptions>();
  CLI::App* cmd = app.add_subcommand("explain", "why a prompt would (not) hit a server's prefix cache, without running it");
  cmd->add_option("prompt", o->prompt, "the prompt text");
  cmd->add_option("-f,--file", o->file, "read the prompt from a file");
  cmd->add_option("--url", o->url, "the server (default http://127.0.0.1:8080)");
  cmd->add_option("-m,--model", o->model, "the served model's name (checked by the server)");
  cmd->add_option("--cache-salt", o->salt, "the request's cache_salt (tenant)");
  cmd->add_option("--api-key", o->api_key, "the server's API key (default: $PAGODA_API_KEY)");
  cmd->add_flag("--chat", o->chat, "send the prompt as one user message (the chat template applies)");
  cmd->add_flag("--json", o->json, "print the server's JSON");
  cmd->callback([o, &exit_code] {
    if (o->prompt.empty() && o->file.empty()) {
      exit_code = fail(Status::invalid_argument("give a prompt or -f FILE"));
      return;
    }
    exit_code = explain(*o);
  });
}

}  // namespace pagoda::tools
