#include "tools/serve_bench_client.h"

#include <httplib.h>

#include <algorithm>

namespace pagoda::tools {

using nlohmann::json;

Result<ServerUrl> parse_server_url(const std::string& url) {
  const size_t scheme_end = url.find("://");
  if (scheme_end == std::string::npos || (url.compare(0, scheme_end, "http") != 0 && url.compare(0, scheme_end, "https") != 0)) {
    return Status::invalid_argument("--url must look like http://HOST:PORT, got '" + url + "'");
  }
  const size_t path_start = url.find('/', scheme_end + 3);
  ServerUrl out;
  out.origin = url.substr(0, path_start);
  if (out.origin.size() <= scheme_end + 3) return Status::invalid_argument("--url has no host: '" + url + "'");
  if (path_start != std::string::npos) out.prefix = url.substr(path_start);
  while (!out.prefix.empty() && out.prefix.back() == '/') out.prefix.pop_back();
  return out;
}

void SseParser::feed(std::string_view bytes, const std::function<void(const std::string&)>& on_data) {
  line_.append(bytes);
  size_t pos = 0;
  for (size_t eol; (eol = line_.find('\n', pos)) != std::string::npos; pos = eol + 1) {
    std::string_view line(line_.data() + pos, eol - pos);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty()) {  // the blank line that ends an event
      if (has_data_) on_data(data_);
      data_.clear();
      has_data_ = false;
    } else if (line.substr(0, 5) == "data:") {
      line.remove_prefix(5);
      if (!line.empty() && line.front() == ' ') line.remove_prefix(1);
      if (has_data_) data_ += '\n';
      data_.append(line);
      has_data_ = true;
    }  // other fields (event:, id:, retry:) and comments (":...") are ignored
  }
  line_.erase(0, pos);
}

ChunkInfo interpret_chunk(const std::string& payload) {
  ChunkInfo info;
  if (payload == "[DONE]") {
    info.done = true;
    return info;
  }
  const json j = json::parse(payload, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    info.error = "unreadable stream chunk: " + payload.substr(0, 200);
    return info;
  }
  if (j.contains("error")) {
    const json& e = j["error"];
    info.error = "error event: " + ((e.is_object() && e.contains("message") && e["message"].is_string())
                                        ? e["message"].get<std::string>()
                                        : e.dump());
    return info;
  }
  if (j.contains("choices") && j["choices"].is_array()) {
    for (const json& c : j["choices"]) {
      if (!c.is_object()) continue;
      if (c.contains("text") && c["text"].is_string()) info.text += c["text"].get<std::string>();
      if (c.contains("delta") && c["delta"].is_object() && c["delta"].contains("content") &&
          c["delta"]["content"].is_string()) {
        info.text += c["delta"]["content"].get<std::string>();
      }
    }
  }
  if (j.contains("usage") && j["usage"].is_object()) {
    const json& u = j["usage"];
    auto number = [](const json& obj, const char* key) -> int64_t {
      return obj.contains(key) && obj[key].is_number_integer() ? obj[key].get<int64_t>() : 0;
    };
    info.has_usage = true;
    info.prompt_tokens = number(u, "prompt_tokens");
    info.completion_tokens = number(u, "completion_tokens");
    if (u.contains("prompt_tokens_details") && u["prompt_tokens_details"].is_object()) {
      info.cached_tokens = number(u["prompt_tokens_details"], "cached_tokens");
    }
  }
  return info;
}

namespace {

std::unique_ptr<httplib::Client> make_client(const ClientSettings& settings) {
  auto client = std::make_unique<httplib::Client>(settings.url.origin);
  const auto seconds = static_cast<time_t>(settings.timeout_s);
  const auto micros = static_cast<time_t>((settings.timeout_s - static_cast<double>(seconds)) * 1e6);
  client->set_connection_timeout(seconds, micros);
  client->set_read_timeout(seconds, micros);
  client->set_write_timeout(seconds, micros);
  return client;
}

}  // namespace

RequestRecord send_streaming(const ClientSettings& settings, const std::string& path, const json& body,
                             const Clock& clock, double t0_s, std::string* text) {
  RequestRecord record;
  auto now = [&] { return clock.now_seconds() - t0_s; };
  const std::unique_ptr<httplib::Client> client = make_client(settings);

  httplib::Request req;
  req.method = "POST";
  req.path = settings.url.prefix + path;
  req.headers = {{"Accept", "text/event-stream"}};
  req.body = body.dump();
  req.set_header("Content-Type", "application/json");

  int status = 0;
  std::string error_body;
  bool done = false;
  SseParser parser;
  req.response_handler = [&](const httplib::Response& res) {
    status = res.status;
    return true;
  };
  req.content_receiver = [&](const char* data, size_t size, uint64_t, uint64_t) {
    if (status < 200 || status >= 300) {
      if (error_body.size() < 4096) error_body.append(data, std::min<size_t>(size, 4096));
      return true;
    }
    const double t = now();
    parser.feed(std::string_view(data, size), [&](const std::string& payload) {
      if (!record.error.empty() || done) return;
      const ChunkInfo chunk = interpret_chunk(payload);
      if (!chunk.error.empty()) {
        record.error = chunk.error;
        return;
      }
      if (chunk.done) {
        done = true;
        return;
      }
      if (!chunk.text.empty()) {
        record.token_times_s.push_back(t);
        if (text != nullptr) *text += chunk.text;
      }
      if (chunk.has_usage) {
        record.usage_seen = true;
        record.prompt_tokens = chunk.prompt_tokens;
        record.completion_tokens = chunk.completion_tokens;
        record.cached_tokens = chunk.cached_tokens;
      }
    });
    return record.error.empty();  // stop reading after an error event
  };

  record.send_s = now();
  const httplib::Result result = client->send(req);
  record.end_s = now();
  if (!record.error.empty()) return record;
  if (status != 0 && (status < 200 || status >= 300)) {
    std::string message = error_body;
    const json j = json::parse(error_body, nullptr, false);
    if (!j.is_discarded() && j.is_object() && j.contains("error") && j["error"].is_object() &&
        j["error"].contains("message") && j["error"]["message"].is_string()) {
      message = j["error"]["message"].get<std::string>();
    }
    if (message.size() > 200) message.resize(200);
    record.error = "HTTP " + std::to_string(status) + (message.empty() ? "" : ": " + message);
    return record;
  }
  if (!result) {
    record.error = "connection: " + httplib::to_string(result.error());
    return record;
  }
  if (!done) {
    record.error = "stream ended without [DONE]";
    return record;
  }
  if (!record.usage_seen) record.completion_tokens = static_cast<int64_t>(record.token_times_s.size());
  record.ok = true;
  return record;
}

std::string probe_model_id(const ClientSettings& settings) {
  const std::unique_ptr<httplib::Client> client = make_client(settings);
  const httplib::Result result = client->Get(settings.url.prefix + "/v1/models");
  if (!result || result->status != 200) return "";
  const json j = json::parse(result->body, nullptr, false);
  if (j.is_discarded() || !j.is_object() || !j.contains("data") || !j["data"].is_array() || j["data"].empty()) return "";
  const json& first = j["data"][0];
  if (!first.is_object() || !first.contains("id") || !first["id"].is_string()) return "";
  return first["id"].get<std::string>();
}

}  // namespace pagoda::tools
