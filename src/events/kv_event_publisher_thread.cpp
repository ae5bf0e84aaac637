// The publisher thread of KvEventPublisher (kv_event_publisher.h): batches, sends, replays.
#include <unistd.h>
#include <zmq.h>

#include <cerrno>

#include "events/event_codec.h"
#include "events/kv_event_publisher.h"

namespace pagoda::events {

void KvEventPublisher::run() {
  std::vector<std::string> media;  // a copy of media_ (the step thread may add names)
  zmq_pollitem_t items[2] = {{nullptr, wake_fd_, ZMQ_POLLIN, 0}, {replay_.get(), 0, ZMQ_POLLIN, 0}};
  const int num_items = replay_.valid() ? 2 : 1;
  while (true) {
    if (zmq_poll(items, num_items, -1) < 0) {
      if (zmq_errno() == EINTR) continue;
      logger_.error("KV events: zmq_poll failed: " + zmq_error_text());
      break;
    }
    if ((items[0].revents & ZMQ_POLLIN) != 0) {
      uint64_t count = 0;
      [[maybe_unused]] const ssize_t n = ::read(wake_fd_, &count, sizeof(count));
    }
    bool stopping = false;
    {
      std::lock_guard lock(mutex_);
      std::swap(queue_, sending_);  // the step thread refills the emptied buffers, capacity kept
      if (media.size() != media_.size()) media = media_;
      stopping = stopping_;
    }
    publish(sending_, media);
    sending_.clear();
    if (num_items > 1 && (items[1].revents & ZMQ_POLLIN) != 0) serve_replay();
    if (stopping) break;
  }
  pub_.close();
  replay_.close();
}

KvEvent KvEventPublisher::to_event(const Queue& q, const Pending& p, const std::vector<std::string>& media) const {
  KvEvent e;
  e.type = p.type;
  if (p.type == KvEventType::kAllBlocksCleared) return e;
  e.block_hashes.assign(q.hashes.begin() + p.hash_begin, q.hashes.begin() + p.hash_begin + p.num_hashes);
  e.medium = media[p.medium];
  e.group_idx = 0;
  if (p.type == KvEventType::kBlockStored) {
    if (p.has_parent) e.parent_block_hash = p.parent;
    e.token_ids.assign(q.tokens.begin() + p.token_begin, q.tokens.begin() + p.token_begin + p.num_tokens);
    e.block_size = p.block_size;
    e.extra_keys.assign(p.num_hashes, p.salt_key);
  }
  return e;
}

void KvEventPublisher::publish(const Queue& q, const std::vector<std::string>& media) {
  KvEventBatch batch;
  batch.data_parallel_rank = config_.data_parallel_rank;
  for (const Pending& p : q.events) {
    switch (p.kind) {
      case Kind::kBarrier: {
        send_batch(batch);  // the snapshot is the state after the batches sent so far
        std::lock_guard lock(mutex_);
        barrier_seqs_[p.barrier_id] = next_seq_ - 1;
        barrier_cv_.notify_all();
        break;
      }
      case Kind::kLoss:
        send_batch(batch);
        ++next_seq_;  // a hole no replay can fill: subscribers resync
        break;
      case Kind::kEvent:
        batch.events.push_back(to_event(q, p, media));
        if (batch.events.size() >= kMaxBatchEvents) send_batch(batch);
        break;
    }
  }
  send_batch(batch);
}

void KvEventPublisher::send_batch(KvEventBatch& batch) {
  if (batch.events.empty()) return;
  batch.ts = unix_time_();
  payload_.clear();
  encode_batch(batch, config_.encoding, payload_);
  const int64_t seq = next_seq_++;
  const std::string seq_bytes = encode_seq(seq);
  const bool sent = pub_.send({config_.topic, seq_bytes, payload_});
  replay_buffer_.emplace_back(seq, payload_);
  while (static_cast<int64_t>(replay_buffer_.size()) > config_.buffer_steps) replay_buffer_.pop_front();
  {
    std::lock_guard lock(mutex_);
    ++stats_.batches_published;
    stats_.events_published += static_cast<int64_t>(batch.events.size());
    if (!sent) ++stats_.send_failures;
    stats_.last_seq = seq;
  }
  batch.events.clear();
}

void KvEventPublisher::serve_replay() {
  static const std::string kEndSeq = encode_seq(-1);
  while (replay_.receive(frames_, /*block=*/false, /*max_frames=*/4)) {
    // [identity, "", start] from REQ/DEALER with an envelope, or [identity, start].
    int64_t start = 0;
    const bool envelope = frames_.size() == 3 && frames_[1].empty();
    const bool ok = (envelope || frames_.size() == 2) && decode_seq(frames_.back(), start);
    {
      std::lock_guard lock(mutex_);
      ++stats_.replay_requests;
      if (!ok) ++stats_.replay_rejected;
    }
    if (!ok) {
      logger_.warn("KV events: a malformed replay request (" + std::to_string(frames_.size()) + " frames)");
      continue;
    }
    const std::string_view identity = frames_[0];
    for (const auto& [seq, payload] : replay_buffer_) {
      if (seq < start) continue;
      const std::string seq_bytes = encode_seq(seq);
      if (envelope) {
        replay_.send({identity, "", seq_bytes, payload});
      } else {
        replay_.send({identity, seq_bytes, payload});
      }
    }
    if (envelope) {
      replay_.send({identity, "", kEndSeq, ""});
    } else {
      replay_.send({identity, kEndSeq, ""});
    }
  }
}

}  // namespace pagoda::events
