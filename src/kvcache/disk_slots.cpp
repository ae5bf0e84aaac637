#include "kvcache/disk_slots.h"

#include <algorithm>
#include <limits>

#include "core/check.h"

namespace pagoda::kvcache {

RunAllocator::RunAllocator(int64_t num_units)
    : used_(static_cast<size_t>((num_units + 63) / 64), 0), num_units_(num_units), num_free_(num_units) {
  CHECK_GE(num_units, 0);
}

bool RunAllocator::is_free(int64_t unit) const {
  CHECK(unit >= 0 && unit < num_units_) << "unit " << unit << " of " << num_units_;
  return (used_[static_cast<size_t>(unit / 64)] >> (unit % 64) & 1) == 0;
}

void RunAllocator::set(int64_t unit, bool used) {
  uint64_t& word = used_[static_cast<size_t>(unit / 64)];
  const uint64_t bit = uint64_t{1} << (unit % 64);
  word = used ? (word | bit) : (word & ~bit);
}

int64_t RunAllocator::free_run(int64_t unit, int64_t limit) const {
  int64_t n = 0;
  while (n < limit && unit + n < num_units_) {
    const int64_t u = unit + n;
    const uint64_t word = used_[static_cast<size_t>(u / 64)];
    if (u % 64 == 0 && word == 0) {
      n += 64;  // a whole free word (clipped below)
      continue;
    }
    if (word >> (u % 64) & 1) break;
    ++n;
  }
  return std::min({n, limit, num_units_ - unit});
}

RunAllocator::Run RunAllocator::allocate(int64_t max_n) {
  CHECK_GT(max_n, 0);
  Run best;
  // Two passes: [cursor, end), then all of [0, end) (so a run across the cursor is seen whole).
  // A run never wraps past the end.
  for (int pass = 0; pass < 2 && best.count < max_n && num_free_ > 0; ++pass) {
    int64_t u = pass == 0 ? cursor_ : 0;
    const int64_t end = num_units_;
    while (u < end) {
      const uint64_t word = used_[static_cast<size_t>(u / 64)];
      if (u % 64 == 0 && word == std::numeric_limits<uint64_t>::max()) {
        u += 64;  // a whole used word
        continue;
      }
      if (word >> (u % 64) & 1) {
        ++u;
        continue;
      }
      const int64_t n = free_run(u, std::min(max_n, end - u));
      if (n > best.count) best = {u, n};
      if (best.count >= max_n) break;
      u += n;
    }
  }
  for (int64_t i = 0; i < best.count; ++i) set(best.first + i, true);
  num_free_ -= best.count;
  if (best.count > 0) cursor_ = (best.first + best.count) % std::max<int64_t>(num_units_, 1);
  return best;
}

void RunAllocator::take(int64_t unit) {
  CHECK(is_free(unit)) << "unit " << unit << " is not free";
  set(unit, true);
  --num_free_;
}

void RunAllocator::release(int64_t first, int64_t count) {
  for (int64_t u = first; u < first + count; ++u) {
    CHECK(!is_free(u)) << "unit " << u << " released twice";
    set(u, false);
  }
  num_free_ += count;
}

const char* slot_state_name(SlotState state) {
  static constexpr const char* kNames[] = {"free", "writing", "committing", "ready", "demoting", "invalidating"};
  return kNames[static_cast<int>(state)];
}

SlotTable::SlotTable(int64_t num_slots, EvictionPolicyKind eviction)
    : slots_(static_cast<size_t>(num_slots)),
      free_(num_slots),
      policy_(make_eviction_policy(eviction, num_slots)) {
  CHECK(num_slots > 0 && num_slots <= std::numeric_limits<int32_t>::max()) << num_slots << " slots";
  index_.reserve(static_cast<size_t>(num_slots));
}

std::optional<int64_t> SlotTable::find(BlockHash hash) const {
  auto it = index_.find(hash);
  if (it == index_.end()) return std::nullopt;
  return it->second;
}

std::optional<int64_t> SlotTable::find_writing(BlockHash hash) const {
  auto it = writing_.find(hash);
  if (it == writing_.end()) return std::nullopt;
  return it->second;
}

void SlotTable::set_state(int64_t id, SlotState state) {
  Slot& s = at(id);
  const bool was_incoming = s.state == SlotState::kDemoting || s.state == SlotState::kInvalidating;
  const bool is_incoming = state == SlotState::kDemoting || state == SlotState::kInvalidating;
  num_incoming_ += static_cast<int64_t>(is_incoming) - static_cast<int64_t>(was_incoming);
  s.state = state;
}

void SlotTable::begin_write(int64_t id, BlockHash hash, int32_t priority) {
  Slot& s = at(id);
  CHECK(s.state == SlotState::kFree && !free_.is_free(id)) << "slot " << id << " not allocated";
  CHECK(!writing_.contains(hash) && !index_.contains(hash)) << "block " << hash << " written twice";
  s = Slot{};
  s.hash = hash;
  s.priority = priority;
  set_state(id, SlotState::kWriting);
  writing_.emplace(hash, id);
}

void SlotTable::begin_commit(int64_t id) {
  CHECK(at(id).state == SlotState::kWriting) << "slot " << id << " is " << slot_state_name(at(id).state);
  set_state(id, SlotState::kCommitting);
}

void SlotTable::commit(int64_t id) {
  Slot& s = at(id);
  CHECK(s.state == SlotState::kCommitting && !s.doomed) << "slot " << id << " is " << slot_state_name(s.state);
  writing_.erase(s.hash);
  set_state(id, SlotState::kReady);
  CHECK(index_.emplace(s.hash, id).second) << "block " << s.hash << " indexed twice";
  s.last_access = ++tick_;
  s.num_accesses = 1;
  become_candidate(id);
}

void SlotTable::release(int64_t id) {
  Slot& s = at(id);
  CHECK(s.state != SlotState::kFree && s.state != SlotState::kReady) << "slot " << id << " is " << slot_state_name(s.state);
  if ((s.state == SlotState::kWriting || s.state == SlotState::kCommitting) && !s.doomed) writing_.erase(s.hash);
  set_state(id, SlotState::kFree);
  s = Slot{};
  free_.release(id, 1);
}

void SlotTable::become_candidate(int64_t id) {
  const Slot& s = slot(id);
  policy_->add(static_cast<int32_t>(id), BlockUsage{s.last_access, s.num_accesses, s.priority});
}

void SlotTable::touch(int64_t id, int32_t priority) {
  Slot& s = at(id);
  CHECK(s.state == SlotState::kReady && !s.doomed) << "slot " << id << " is " << slot_state_name(s.state);
  s.last_access = ++tick_;
  ++s.num_accesses;
  s.priority = std::max(s.priority, priority);
  if (s.pins == 0) {
    policy_->remove(static_cast<int32_t>(id));
    become_candidate(id);
  }
}

void SlotTable::pin(int64_t id) {
  Slot& s = at(id);
  CHECK(s.state == SlotState::kReady && !s.doomed) << "slot " << id << " is " << slot_state_name(s.state);
  if (s.pins++ == 0) policy_->remove(static_cast<int32_t>(id));
}

bool SlotTable::unpin(int64_t id) {
  Slot& s = at(id);
  CHECK(s.state == SlotState::kReady && s.pins > 0) << "slot " << id << " is not pinned";
  if (--s.pins > 0) return false;
  if (s.doomed) return true;
  become_candidate(id);
  return false;
}

void SlotTable::doom(int64_t id) {
  Slot& s = at(id);
  CHECK(!s.doomed) << "slot " << id << " doomed twice";
  if (s.state == SlotState::kReady) {
    index_.erase(s.hash);
    if (s.pins == 0) policy_->remove(static_cast<int32_t>(id));
    if (on_removed_) on_removed_(s.hash);
  } else {
    CHECK(s.state == SlotState::kWriting || s.state == SlotState::kCommitting)
        << "slot " << id << " is " << slot_state_name(s.state);
    writing_.erase(s.hash);
  }
  s.doomed = true;
}

void SlotTable::begin_invalidate(int64_t id) {
  Slot& s = at(id);
  const bool dropped = s.doomed && s.pins == 0 && (s.state == SlotState::kReady || s.state == SlotState::kCommitting);
  CHECK(dropped || s.state == SlotState::kDemoting)
      << "slot " << id << " (" << slot_state_name(s.state) << ") cannot be invalidated now";
  set_state(id, SlotState::kInvalidating);
}

void SlotTable::evict(int64_t id, bool demote) {
  Slot& s = at(id);
  CHECK(s.state == SlotState::kReady && !s.doomed && s.pins == 0) << "slot " << id << " is not evictable";
  index_.erase(s.hash);
  policy_->remove(static_cast<int32_t>(id));
  if (on_removed_) on_removed_(s.hash);
  if (demote) {
    set_state(id, SlotState::kDemoting);
  } else {
    set_state(id, SlotState::kFree);
    s = Slot{};
    free_.release(id, 1);
  }
}

void SlotTable::adopt(int64_t id, BlockHash hash) {
  Slot& s = at(id);
  CHECK(s.state == SlotState::kFree) << "slot " << id << " is " << slot_state_name(s.state);
  CHECK(!index_.contains(hash)) << "block " << hash << " adopted twice";
  free_.take(id);
  s = Slot{};
  s.hash = hash;
  s.last_access = ++tick_;
  set_state(id, SlotState::kReady);
  index_.emplace(hash, id);
  become_candidate(id);
}

void SlotTable::check_integrity() const {
  int64_t ready = 0, incoming = 0, free = 0, candidates = 0;
  for (int64_t id = 0; id < num_slots(); ++id) {
    const Slot& s = slot(id);
    CHECK_EQ(free_.is_free(id), s.state == SlotState::kFree) << "slot " << id;
    const bool indexed = s.state == SlotState::kReady && !s.doomed;
    if (indexed) {
      auto it = index_.find(s.hash);
      CHECK(it != index_.end() && it->second == id) << "ready slot " << id << " not indexed";
      ++ready;
    }
    const bool evictable = indexed && s.pins == 0;
    CHECK_EQ(policy_->contains(static_cast<int32_t>(id)), evictable) << "slot " << id;
    candidates += evictable;
    CHECK(s.pins == 0 || s.state == SlotState::kReady) << "slot " << id << " pinned while " << slot_state_name(s.state);
    incoming += s.state == SlotState::kDemoting || s.state == SlotState::kInvalidating;
    free += s.state == SlotState::kFree;
    if ((s.state == SlotState::kWriting || s.state == SlotState::kCommitting) && !s.doomed) {
      auto it = writing_.find(s.hash);
      CHECK(it != writing_.end() && it->second == id) << "writing slot " << id << " not tracked";
    }
  }
  CHECK_EQ(ready, num_ready());
  CHECK_EQ(candidates, policy_->size());
  CHECK_EQ(incoming, num_incoming_);
  CHECK_EQ(free, free_.num_free());
}

}  // namespace pagoda::kvcache
