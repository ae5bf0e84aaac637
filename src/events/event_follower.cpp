#include "events/event_follower.h"

namespace pagoda::events {

void EventFollower::reset(const KvEventsSnapshot& snapshot) {
  index_->reset(snapshot);
  synced_ = true;
  next_ = snapshot.seq + 1;
}

void EventFollower::unsync() {
  index_->clear();
  synced_ = false;
}

EventFollower::Verdict EventFollower::apply(int64_t seq, std::string_view payload) {
  DecodeInfo info;
  auto batch = decode_batch(payload, &info);
  if (!batch.is_ok()) {
    unsync();
    return Verdict::kMalformed;
  }
  index_->apply(*batch);
  next_ = seq + 1;
  ++batches_applied_;
  events_applied_ += static_cast<int64_t>(batch->events.size());
  unknown_events_ += info.unknown_events;
  return Verdict::kApplied;
}

EventFollower::Verdict EventFollower::on_batch(int64_t seq, std::string_view payload) {
  const bool backwards = last_live_ >= 0 && seq <= last_live_;
  last_live_ = seq;
  if (backwards) {
    unsync();
    return Verdict::kRestarted;
  }
  if (!synced_) return Verdict::kUnsynced;
  if (seq < next_) return Verdict::kStale;
  if (seq > next_) return Verdict::kGap;
  return apply(seq, payload);
}

EventFollower::Verdict EventFollower::on_replayed(int64_t seq, std::string_view payload) {
  if (!synced_) return Verdict::kUnsynced;
  if (seq < next_) return Verdict::kStale;
  if (seq > next_) return Verdict::kGap;
  return apply(seq, payload);
}

}  // namespace pagoda::events
