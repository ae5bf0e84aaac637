// POST /v1/completions and /v1/chat/completions through the router: place, forward, retry while
// nothing reached the client, then pass the answer (or the SSE stream) through as it comes.
#include <httplib.h>

#include <cstdlib>

#include "router/router_server.h"
#include "server/http/auth.h"
#include "server/http/connection.h"
#include "server/http/errors.h"

namespace pagoda::router {

namespace {

bool retryable(int status) { return status == 429 || status >= 500; }

// The last usage.prompt_tokens_details.cached_tokens in a body or the tail of a stream.
int64_t cached_tokens_in(std::string_view text) {
  const std::string_view key = "\"cached_tokens\":";
  const size_t at = text.rfind(key);
  if (at == std::string_view::npos) return 0;
  size_t i = at + key.size();
  while (i < text.size() && text[i] == ' ') ++i;
  int64_t v = 0;
  for (; i < text.size() && text[i] >= '0' && text[i] <= '9'; ++i) v = v * 10 + (text[i] - '0');
  return v;
}

// The bytes kept of a stream's end, where its usage chunk is.
constexpr size_t kTailBytes = 4096;
void keep_tail(std::string& tail, const std::string& chunk) {
  tail += chunk;
  if (tail.size() > 2 * kTailBytes) tail.erase(0, tail.size() - kTailBytes);
}

struct Failure {
  int status = 0;  // 0: no answer at all (connection)
  std::string body, content_type, retry_after, message;
};

}  // namespace

// A stream committed to the client: the rest of the worker's bytes, as they come.
struct RouterServer::Attempt {
  std::unique_ptr<Upstream> up;
  Worker* worker = nullptr;
  Ticket ticket;
  std::string pending;            // taken from upstream, not yet written
  std::string tail;
  int64_t predicted_cached = 0, prompt_tokens = 0;
  bool finished = false;
};

void RouterServer::handle_generate(const httplib::Request& req, httplib::Response& res, bool chat) {
  if (!authorized(req, res)) return;
  count(&RouterCounters::requests);
  const int64_t received_ns = clock_.now_ns();
  const RoutingRequest rr = read_routing_request(req.body, chat, *tokenizer_, chat_template_,
                                                 http::bearer_token(req.get_header_value("Authorization")));
  const http::ConnectionProbe probe(req.remote_addr, req.remote_port, req.local_addr, req.local_port);
  const double poll = config_.poll_interval_s;
  std::vector<bool> tried(workers_.size(), false);
  Failure last;
  const std::optional<std::string> decode_body =
      config_.prefill_workers.empty() ? std::optional<std::string>() : prefill_remotely(req);
  for (int attempt = 0; attempt <= config_.max_retries; ++attempt) {
    int64_t overlap = 0;
    const int w = choose(rr, tried, overlap);
    if (w < 0) break;
    tried[w] = true;
    if (attempt > 0) count(&RouterCounters::retries);
    Worker& worker = *workers_[w];
    const int64_t block_size = worker.info() ? worker.info()->block_size : 16;
    const int64_t prompt_tokens = static_cast<int64_t>(rr.tokens.size());
    Ticket ticket;
    ticket.prefill_tokens = std::max<int64_t>(0, prompt_tokens - overlap * block_size);
    ticket.blocks = (prompt_tokens + std::max<int64_t>(0, rr.max_tokens) * rr.num_choices + block_size - 1) / block_size;
    worker.begin(ticket);
    UpstreamRequest upstream = upstream_request(req, worker);
    if (decode_body) upstream.body = *decode_body;
    auto up = std::make_unique<Upstream>(std::move(upstream));
    auto client_left = [&] {
      if (probe.alive()) return false;
      up->cancel();
      worker.end(ticket);
      res.status = 499;  // nobody reads it
      return true;
    };
    auto failed_attempt = [&](const std::string& message) {
      worker.end(ticket);
      worker.count(WorkerCounters{0, 1, 0, 0, 0});
      last = Failure{0, "", "", "", worker.address().url + ": " + message};
    };
    Upstream::State s = Upstream::State::kConnecting;
    while ((s = up->wait_past(Upstream::State::kConnecting, poll)) == Upstream::State::kConnecting) {
      if (client_left()) return;
    }
    if (s == Upstream::State::kFailed) {
      worker.mark_down(up->error());
      failed_attempt(up->error());
      continue;
    }
    const int status = up->status();
    const std::string content_type = up->header("Content-Type");
    const bool sse = status == 200 && content_type.rfind("text/event-stream", 0) == 0;
    std::string body;
    // A JSON answer is taken whole; a stream until its first bytes (until then a retry is free).
    do {
      s = up->take(body, poll);
      if (client_left()) return;
    } while (s != Upstream::State::kDone && s != Upstream::State::kFailed && (!sse || body.empty()));
    if (s == Upstream::State::kFailed && (!sse || body.empty())) {
      worker.mark_down(up->error());
      failed_attempt(up->error());
      continue;
    }
    if (!sse && retryable(status)) {
      if (status == 503) worker.mark_down("HTTP 503 (draining)");  // back when a check passes
      failed_attempt("HTTP " + std::to_string(status));
      last = Failure{status, body, content_type, up->header("Retry-After"), ""};
      continue;
    }
    const WorkerCounters answered{1, 0, overlap * block_size, 0, prompt_tokens};
    if (!sse) {
      worker.end(ticket);
      WorkerCounters c = answered;
      c.reported_cached_tokens = cached_tokens_in(body);
      worker.count(c);
      if (status == 200) observe_ttft(static_cast<size_t>(w), static_cast<double>(clock_.now_ns() - received_ns) * 1e-9);
      res.status = status;
      if (!up->header("Retry-After").empty()) res.set_header("Retry-After", up->header("Retry-After"));
      res.set_content(body, content_type.empty() ? "application/json" : content_type);
      return;
    }
    worker.prefilled(ticket);  // the first bytes of a stream come with its first token
    observe_ttft(static_cast<size_t>(w), static_cast<double>(clock_.now_ns() - received_ns) * 1e-9);
    auto a = std::make_shared<Attempt>();
    a->up = std::move(up);
    a->worker = &worker;
    a->ticket = ticket;
    a->pending = std::move(body);
    a->predicted_cached = answered.predicted_cached_tokens;
    a->prompt_tokens = prompt_tokens;
    res.status = 200;
    res.set_header("Cache-Control", "no-cache");
    res.set_header("X-Accel-Buffering", "no");
    res.set_chunked_content_provider(
        content_type,
        [this, a, poll](size_t, httplib::DataSink& sink) {
          while (true) {
            std::string out = std::move(a->pending);
            a->pending.clear();
            const Upstream::State st = a->up->take(out, out.empty() ? poll : 0);
            if (!out.empty()) {
              keep_tail(a->tail, out);
              if (!sink.write(out.data(), out.size())) return false;  // the client left
            } else if (sink.is_writable && !sink.is_writable()) {
              return false;
            }
            if (st == Upstream::State::kDone || st == Upstream::State::kFailed) {
              a->finished = true;
              a->worker->count(WorkerCounters{1, 0, a->predicted_cached, cached_tokens_in(a->tail), a->prompt_tokens});
              if (st == Upstream::State::kFailed) {  // the worker broke mid-stream: say so, then end
                count(&RouterCounters::broken_streams);
                a->worker->mark_down(a->up->error());
                std::string end = a->tail.size() >= 2 && a->tail.compare(a->tail.size() - 2, 2, "\n\n") == 0 ? "" : "\n\n";
                end += http::sse_event(http::error_body(502, "the worker " + a->worker->address().url +
                                                                 " failed mid-stream: " + a->up->error()));
                end += http::sse_done();
                sink.write(end.data(), end.size());
              }
              sink.done();
              return true;
            }
          }
        },
        [a](bool) {
          a->worker->end(a->ticket);
          if (!a->finished) a->up->cancel();  // the client left: the worker aborts the request
        });
    return;
  }
  count(&RouterCounters::unroutable);
  if (last.status != 0) {  // every worker refused: the last refusal, as it was sent
    res.status = last.status;
    if (!last.retry_after.empty()) res.set_header("Retry-After", last.retry_after);
    res.set_content(last.body, last.content_type.empty() ? "application/json" : last.content_type);
    return;
  }
  res.status = 503;
  res.set_header("Retry-After", "1");
  res.set_content(http::error_body(503, last.message.empty() ? "no worker is up"
                                                             : "no worker could take the request (" + last.message + ")"),
                  "application/json");
}

}  // namespace pagoda::router
