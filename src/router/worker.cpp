#include "router/worker.h"

#include <httplib.h>

namespace pagoda::router {

Result<WorkerAddress> parse_worker_url(const std::string& url) {
  const std::string scheme = "http://";
  if (url.rfind(scheme, 0) != 0) return Status::invalid_argument("--worker must be http://HOST:PORT, got '" + url + "'");
  std::string rest = url.substr(scheme.size());
  while (!rest.empty() && rest.back() == '/') rest.pop_back();
  const size_t colon = rest.rfind(':');
  if (colon == std::string::npos || colon == 0 || rest.find('/') != std::string::npos) {
    return Status::invalid_argument("--worker must be http://HOST:PORT, got '" + url + "'");
  }
  WorkerAddress a;
  a.url = scheme + rest;
  a.host = rest.substr(0, colon);
  const std::string port = rest.substr(colon + 1);
  if (port.empty() || port.size() > 5 || port.find_first_not_of("0123456789") != std::string::npos ||
      std::stoi(port) <= 0 || std::stoi(port) > 65535) {
    return Status::invalid_argument("--worker has a bad port: '" + url + "'");
  }
  a.port = std::stoi(port);
  return a;
}

Worker::Worker(WorkerAddress address, WorkerOptions options, const Clock& clock, const Logger& logger,
               events::HolderIndex* holders, int32_t id)
    : address_(std::move(address)), options_(std::move(options)), clock_(clock), logger_(logger), index_(holders, id) {}

Worker::~Worker() {
  std::unique_ptr<events::KvEventSubscriber> subscriber;
  {
    std::lock_guard lock(mutex_);
    subscriber = std::move(subscriber_);
  }
  if (subscriber != nullptr) subscriber->stop();
}

Result<std::string> Worker::get(const std::string& path) const {
  httplib::Client client(address_.host, address_.port);
  const auto seconds = [](double s) { return std::chrono::duration<double>(s); };
  client.set_connection_timeout(std::chrono::duration_cast<std::chrono::microseconds>(seconds(options_.connect_timeout_s)));
  client.set_read_timeout(std::chrono::duration_cast<std::chrono::microseconds>(seconds(options_.check_timeout_s)));
  httplib::Headers headers;
  if (!options_.api_key.empty()) headers.emplace("Authorization", "Bearer " + options_.api_key);
  auto res = client.Get(path.c_str(), headers);
  if (!res) return Status::unavailable(address_.url + path + ": " + httplib::to_string(res.error()));
  if (res->status != 200) {
    return Status::unavailable(address_.url + path + ": HTTP " + std::to_string(res->status) + " " + res->body.substr(0, 200));
  }
  return res->body;
}

Result<events::KvEventsSnapshot> Worker::fetch_snapshot() const {
  PAGODA_ASSIGN_OR_RETURN(std::string body, get("/v1/kv/events/snapshot"));
  return events::snapshot_from_json(body);
}

Status Worker::check() {
  auto health = get("/health");
  if (!health.is_ok()) {
    mark_down(health.status().message());
    return health.status();
  }
  auto body = get("/v1/kv/events");
  if (!body.is_ok()) {
    mark_down(body.status().message());
    return body.status();
  }
  auto info = parse_worker_info(*body);
  if (!info.is_ok()) {
    mark_down(info.status().message());
    return info.status();
  }
  std::string why_not;
  if (!kvcache::block_hash_scheme_from_name(info->block_hash)) why_not = "its block hash scheme is '" + info->block_hash + "'";
  if (!info->prefix_caching) why_not = "its prefix cache is off";
  if (!info->events_enabled) why_not = "its KV events are off (--kv-events-config)";
  if (info->tokenizer_probe != options_.tokenizer_probe) why_not = "it tokenizes differently from the router's tokenizer";
  follow_events(*info);
  {
    std::lock_guard lock(mutex_);
    const bool was = predictable_;
    predictable_ = why_not.empty();
    if (!predictable_ && (was || !info_)) {
      logger_.warn("router: " + address_.url + " gets requests by load only: " + why_not);
    }
    info_ = *info;
    down_reason_.clear();
  }
  if (!up_.exchange(true)) logger_.info("router: " + address_.url + " is up");
  return Status::ok();
}

void Worker::follow_events(const WorkerInfo& info) {
  if (!info.events_enabled) return;
  const std::string endpoint = reachable_endpoint(info.events_endpoint, address_.host);
  std::unique_ptr<events::KvEventSubscriber> old;
  events::KvEventSubscriber* sub = nullptr;
  bool restarted = false;
  {
    std::lock_guard lock(mutex_);
    restarted = info_ && info_->instance_id != info.instance_id;
    if (subscriber_ != nullptr && endpoint != subscribed_endpoint_) old = std::move(subscriber_);
    sub = subscriber_.get();
  }
  if (old != nullptr) old->stop();  // the worker moved its endpoint (a restart elsewhere)
  if (sub == nullptr) {
    events::SubscriberConfig config;
    config.endpoint = endpoint;
    config.replay_endpoint = info.replay_endpoint.empty() ? "" : reachable_endpoint(info.replay_endpoint, address_.host);
    config.topic = info.topic;
    auto created = std::make_unique<events::KvEventSubscriber>(
        config, index_, [this] { return fetch_snapshot(); }, clock_, logger_);
    const Status started = created->start();
    if (!started.is_ok()) {
      logger_.warn("router: cannot follow the KV events of " + address_.url + ": " + started.message());
      return;
    }
    std::lock_guard lock(mutex_);
    subscriber_ = std::move(created);
    subscribed_endpoint_ = endpoint;
    return;
  }
  if (restarted) {
    sub->request_resync();
  } else {
    sub->note_published(info.last_seq);
  }
}

void Worker::mark_down(const std::string& why) {
  {
    std::lock_guard lock(mutex_);
    down_reason_ = why;
  }
  if (up_.exchange(false)) logger_.warn("router: " + address_.url + " is down: " + why);
}

bool Worker::predictable() const {
  std::lock_guard lock(mutex_);
  return predictable_;
}

std::string Worker::down_reason() const {
  std::lock_guard lock(mutex_);
  return down_reason_;
}

std::optional<WorkerInfo> Worker::info() const {
  std::lock_guard lock(mutex_);
  return info_;
}

std::optional<events::SubscriberStats> Worker::event_stats() const {
  std::lock_guard lock(mutex_);
  if (subscriber_ == nullptr) return std::nullopt;
  return subscriber_->stats();
}

int64_t Worker::matched_blocks(std::span<const kvcache::BlockHash> chain) const {
  if (!predictable()) return 0;
  return index_.matched_blocks(chain);
}

WorkerLoad Worker::load(bool available, int64_t overlap_blocks) const {
  std::lock_guard lock(mutex_);
  WorkerLoad l;
  l.available = available;
  l.overlap_blocks = overlap_blocks;
  l.pending_prefill_tokens = pending_prefill_tokens_;
  l.active_blocks = active_blocks_;
  l.in_flight = in_flight_;
  return l;
}

void Worker::begin(Ticket& t) {
  std::lock_guard lock(mutex_);
  pending_prefill_tokens_ += t.prefill_tokens;
  active_blocks_ += t.blocks;
  ++in_flight_;
}

void Worker::prefilled(Ticket& t) {
  std::lock_guard lock(mutex_);
  if (t.prefilled || t.ended) return;
  t.prefilled = true;
  pending_prefill_tokens_ -= t.prefill_tokens;
}

void Worker::end(Ticket& t) {
  std::lock_guard lock(mutex_);
  if (t.ended) return;
  if (!t.prefilled) pending_prefill_tokens_ -= t.prefill_tokens;
  t.prefilled = t.ended = true;
  active_blocks_ -= t.blocks;
  --in_flight_;
}

void Worker::count(const WorkerCounters& d) {
  std::lock_guard lock(mutex_);
  counters_.routed += d.routed;
  counters_.failed_attempts += d.failed_attempts;
  counters_.predicted_cached_tokens += d.predicted_cached_tokens;
  counters_.reported_cached_tokens += d.reported_cached_tokens;
  counters_.prompt_tokens += d.prompt_tokens;
}

WorkerCounters Worker::counters() const {
  std::lock_guard lock(mutex_);
  return counters_;
}

}  // namespace pagoda::router
