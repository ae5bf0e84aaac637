#include "events/kv_event_subscriber.h"

#include <sys/eventfd.h>
#include <unistd.h>
#include <zmq.h>

#include "core/check.h"

namespace pagoda::events {

KvEventSubscriber::KvEventSubscriber(SubscriberConfig config, BlockIndex& index, SnapshotSource snapshot_source,
                                     const Clock& clock, const Logger& logger)
    : config_(std::move(config)),
      index_(index),
      snapshot_source_(std::move(snapshot_source)),
      clock_(clock),
      logger_(logger),
      follower_(index) {
  CHECK(snapshot_source_ != nullptr);
}

KvEventSubscriber::~KvEventSubscriber() {
  stop();
  if (wake_fd_ >= 0) ::close(wake_fd_);
}

Status KvEventSubscriber::start() {
  CHECK(!thread_.joinable()) << "started twice";
  wake_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (wake_fd_ < 0) return Status::error("eventfd failed");
  sub_ = ZmqSocket(context_, ZMQ_SUB);
  PAGODA_RETURN_IF_ERROR(sub_.set_bytes(ZMQ_SUBSCRIBE, config_.topic));
  PAGODA_RETURN_IF_ERROR(sub_.set_int(ZMQ_RCVHWM, 0));  // never drop here: the publisher's HWM bounds it
  PAGODA_RETURN_IF_ERROR(sub_.connect(config_.endpoint).with_context("KV events"));
  if (!config_.replay_endpoint.empty()) {
    replay_ = ZmqSocket(context_, ZMQ_DEALER);
    PAGODA_RETURN_IF_ERROR(replay_.connect(config_.replay_endpoint).with_context("KV events replay"));
  }
  thread_ = std::thread([this] { run(); });
  return Status::ok();
}

void KvEventSubscriber::wake() {
  const uint64_t one = 1;
  [[maybe_unused]] const ssize_t n = ::write(wake_fd_, &one, sizeof(one));
}

void KvEventSubscriber::stop() {
  if (!thread_.joinable()) return;
  stop_ = true;
  wake();
  thread_.join();
  sub_.close();
  replay_.close();
}

void KvEventSubscriber::request_resync() {
  resync_requested_ = true;
  if (thread_.joinable()) wake();
}

void KvEventSubscriber::note_published(int64_t last_seq) {
  bool behind = false;
  {
    std::lock_guard lock(stats_mutex_);
    behind = tail_mark_ >= 0 && stats_.next_seq <= tail_mark_;
    tail_mark_ = behind ? -1 : last_seq;
  }
  if (behind) request_resync();
}

SubscriberStats KvEventSubscriber::stats() const {
  std::lock_guard lock(stats_mutex_);
  return stats_;
}

void KvEventSubscriber::run() {
  resync(/*forced=*/true);
  zmq_pollitem_t items[2] = {{sub_.get(), 0, ZMQ_POLLIN, 0}, {nullptr, wake_fd_, ZMQ_POLLIN, 0}};
  while (!stop_) {
    // While unsynced, wake up for the next resync try even if nothing arrives.
    const long timeout_ms = follower_.synced() ? -1 : static_cast<long>(config_.resync_interval_s * 1000) + 1;
    if (zmq_poll(items, 2, timeout_ms) < 0) {
      if (zmq_errno() == EINTR) continue;
      logger_.error("KV events subscriber: zmq_poll failed: " + zmq_error_text());
      return;
    }
    if ((items[1].revents & ZMQ_POLLIN) != 0) {
      uint64_t count = 0;
      [[maybe_unused]] const ssize_t n = ::read(wake_fd_, &count, sizeof(count));
    }
    if (stop_) return;
    if (resync_requested_.exchange(false)) resync(/*forced=*/true);
    if ((items[0].revents & ZMQ_POLLIN) != 0) receive_live();
    if (!follower_.synced()) resync(/*forced=*/false);
  }
}

void KvEventSubscriber::receive_live() {
  while (sub_.receive(frames_, /*block=*/false, /*max_frames=*/4)) {
    int64_t seq = 0;
    if (frames_.size() != 3 || !decode_seq(frames_[1], seq)) {
      std::lock_guard lock(stats_mutex_);
      ++stats_.malformed;
      continue;
    }
    const std::string payload = std::move(frames_[2]);
    on_live(seq, payload);
  }
}

void KvEventSubscriber::on_live(int64_t seq, std::string_view payload) {
  using V = EventFollower::Verdict;
  V v = follower_.on_batch(seq, payload);
  if (v == V::kGap) {
    {
      std::lock_guard lock(stats_mutex_);
      ++stats_.gaps;
    }
    logger_.info("KV events " + config_.endpoint + ": gap before batch " + std::to_string(seq) + " (expected " +
                 std::to_string(follower_.next_seq()) + ")");
    if (replay()) v = follower_.on_replayed(seq, payload);
    if (v == V::kApplied || v == V::kStale) {
      std::lock_guard lock(stats_mutex_);
      ++stats_.gaps_filled;
    } else if (follower_.synced()) {
      follower_.unsync();  // replay could not fill it
    }
  }
  {
    std::lock_guard lock(stats_mutex_);
    if (v == V::kRestarted) ++stats_.restarts;
    if (v == V::kMalformed) ++stats_.malformed;
    stats_.batches_applied = follower_.batches_applied();
    stats_.events_applied = follower_.events_applied();
    stats_.unknown_events = follower_.unknown_events();
    stats_.next_seq = follower_.next_seq();
    stats_.synced = follower_.synced();
  }
  if (!follower_.synced()) resync(/*forced=*/v == V::kRestarted || v == V::kMalformed || v == V::kGap);
}

bool KvEventSubscriber::replay() {
  if (!replay_.valid()) return false;
  {
    std::lock_guard lock(stats_mutex_);
    ++stats_.replays;
  }
  const std::string start = encode_seq(follower_.next_seq());
  if (!replay_.send({"", start})) return false;
  zmq_pollitem_t item = {replay_.get(), 0, ZMQ_POLLIN, 0};
  const long timeout_ms = static_cast<long>(config_.replay_timeout_s * 1000);
  bool gap = false;
  while (true) {
    if (zmq_poll(&item, 1, timeout_ms) <= 0 || !replay_.receive(frames_, /*block=*/false, 5)) {
      // No answer in time: a fresh socket, so late replies never mix into the next replay.
      replay_ = ZmqSocket(context_, ZMQ_DEALER);
      if (!replay_.connect(config_.replay_endpoint).is_ok()) replay_.close();
      return false;
    }
    // ["", seq, payload] or ["", topic, seq, payload]; the end: seq -1.
    if (frames_.size() < 3 || !frames_[0].empty()) continue;
    const size_t seq_at = frames_.size() == 3 ? 1 : 2;
    int64_t seq = 0;
    if (!decode_seq(frames_[seq_at], seq)) continue;
    if (seq < 0) return !gap;
    if (gap) continue;  // drain to the end marker; a resync follows
    const EventFollower::Verdict v = follower_.on_replayed(seq, frames_[seq_at + 1]);
    if (v == EventFollower::Verdict::kGap || v == EventFollower::Verdict::kMalformed ||
        v == EventFollower::Verdict::kUnsynced) {
      gap = true;  // the batches we need are gone
    }
  }
}

void KvEventSubscriber::resync(bool forced) {
  const int64_t now = clock_.now_ns();
  const int64_t interval = static_cast<int64_t>(config_.resync_interval_s * 1e9);
  if (!forced && tried_resync_ && now - last_resync_ns_ < interval) return;
  tried_resync_ = true;
  last_resync_ns_ = now;
  Result<KvEventsSnapshot> snapshot = snapshot_source_();
  std::lock_guard lock(stats_mutex_);
  if (!snapshot.is_ok()) {
    ++stats_.resync_failures;
    follower_.unsync();
    logger_.warn("KV events " + config_.endpoint + ": resync failed: " + snapshot.status().message());
  } else {
    follower_.reset(*snapshot);
    ++stats_.resyncs;
  }
  stats_.next_seq = follower_.next_seq();
  stats_.synced = follower_.synced();
}

}  // namespace pagoda::events
