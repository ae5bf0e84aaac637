// The HTTP side of `pagoda bench-serve`: one streamed OpenAI-style request, timed per chunk.
//
// A request is POSTed with "stream": true and "stream_options": {"include_usage": true}; the
// response is read as Server-Sent Events as it arrives (httplib's content receiver), so each
// chunk's arrival time is its own. SseParser splits the byte stream into event payloads
// ("data:" lines; events end at a blank line; "\n" or "\r\n" line ends). interpret_chunk() reads one
// payload: generated text (choices[].text for completions, choices[].delta.content for chat),
// usage (prompt_tokens, completion_tokens, prompt_tokens_details.cached_tokens) or an error.
// Failures of any kind (connection, HTTP status, malformed stream, an error event, a stream
// without "[DONE]") become RequestRecord::error; nothing here throws or aborts.
#pragma once

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "core/clock.h"
#include "core/status.h"
#include "tools/serve_bench_stats.h"

namespace pagoda::tools {

// "http://host:port[/prefix]" -> the client's scheme://host:port and the path prefix ("" or
// "/prefix", no trailing slash) put before "/v1/...".
struct ServerUrl {
  std::string origin;
  std::string prefix;
};
Result<ServerUrl> parse_server_url(const std::string& url);

class SseParser {
 public:
  // Calls on_data(payload) for every complete event that has data lines (joined with "\n").
  void feed(std::string_view bytes, const std::function<void(const std::string&)>& on_data);
  bool has_partial_event() const { return !line_.empty() || has_data_; }

 private:
  std::string line_;       // bytes of the line being received
  std::string data_;       // data lines of the event being received, joined with "\n"
  bool has_data_ = false;
};

// What one SSE data payload said.
struct ChunkInfo {
  bool done = false;          // "[DONE]"
  std::string error;          // non-empty: the payload was an error or unreadable
  std::string text;           // generated text in this chunk (all choices)
  bool has_usage = false;
  int64_t prompt_tokens = 0, completion_tokens = 0, cached_tokens = 0;
};
ChunkInfo interpret_chunk(const std::string& payload);

struct ClientSettings {
  ServerUrl url;
  double timeout_s = 600;     // connect, read and write timeouts
};

// POSTs `body` to url.prefix + path and streams the answer. Times are clock seconds minus
// t0_s. The generated text is appended to *text (may be null).
RequestRecord send_streaming(const ClientSettings& settings, const std::string& path, const nlohmann::json& body,
                             const Clock& clock, double t0_s, std::string* text);

// GET url.prefix + "/v1/models": the first model id, or "" when the server has none to say.
std::string probe_model_id(const ClientSettings& settings);

}  // namespace pagoda::tools
