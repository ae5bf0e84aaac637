#include "engine/kv_history.h"

#include <algorithm>

namespace pagoda::engine {

KvHistory::KvHistory(const Clock& clock)
    : clock_(clock), evictions_(static_cast<size_t>(kEvictionSlots)), ticks_(static_cast<size_t>(kTickRing)) {}

void KvHistory::on_blocks_stored(std::span<const kvcache::BlockInfo> chain) {
  if (chain.empty()) return;
  const kvcache::KvNamespace& ns = chain.front().ns;
  const int64_t now = clock_.now_ns();
  int at = -1;
  for (int i = 0; i < num_namespaces_; ++i) {
    if (namespaces_[i].ns == ns) at = i;
  }
  if (at < 0) {
    if (num_namespaces_ < kMaxNamespaces) {
      at = num_namespaces_++;
    } else {  // replace the least recently seen
      at = 0;
      for (int i = 1; i < num_namespaces_; ++i) {
        if (namespaces_[i].last_stored_ns < namespaces_[at].last_stored_ns) at = i;
      }
    }
    namespaces_[at] = SeenNamespace{ns, now, 0};
  }
  namespaces_[at].last_stored_ns = now;
  namespaces_[at].blocks_stored += static_cast<int64_t>(chain.size());
}

void KvHistory::on_block_evicted(const kvcache::BlockInfo& block) {
  Eviction& slot = evictions_[static_cast<size_t>(block.hash & static_cast<uint64_t>(kEvictionSlots - 1))];
  slot.hash = block.hash;
  slot.at_ns = clock_.now_ns();
  ++num_evictions_;
}

std::optional<int64_t> KvHistory::evicted_at_ns(kvcache::BlockHash hash) const {
  const Eviction& slot = evictions_[static_cast<size_t>(hash & static_cast<uint64_t>(kEvictionSlots - 1))];
  if (slot.at_ns < 0 || slot.hash != hash) return std::nullopt;
  return slot.at_ns;
}

std::vector<KvHistory::SeenNamespace> KvHistory::namespaces() const {
  std::vector<SeenNamespace> out(namespaces_.begin(), namespaces_.begin() + num_namespaces_);
  std::sort(out.begin(), out.end(),
            [](const SeenNamespace& a, const SeenNamespace& b) { return a.last_stored_ns > b.last_stored_ns; });
  return out;
}

void KvHistory::mark_tick(uint64_t tick, int64_t now_ns) {
  if (num_ticks_ > 0) {
    const Tick& last = ticks_[static_cast<size_t>((ticks_head_ + num_ticks_ - 1) % kTickRing)];
    if (last.tick == tick) return;  // nothing happened to any block since
  }
  if (num_ticks_ < kTickRing) {
    ticks_[static_cast<size_t>((ticks_head_ + num_ticks_) % kTickRing)] = {tick, now_ns};
    ++num_ticks_;
  } else {
    ticks_[static_cast<size_t>(ticks_head_)] = {tick, now_ns};
    ticks_head_ = (ticks_head_ + 1) % kTickRing;
  }
}

std::optional<int64_t> KvHistory::time_of_tick(uint64_t tick) const {
  if (num_ticks_ == 0) return std::nullopt;
  auto at = [&](int64_t i) -> const Tick& { return ticks_[static_cast<size_t>((ticks_head_ + i) % kTickRing)]; };
  // The oldest step already past `tick` may have happened before the ring began: unknown.
  if (num_ticks_ == kTickRing && tick < at(0).tick) return std::nullopt;
  int64_t lo = 0, hi = num_ticks_;  // first i with at(i).tick >= tick
  while (lo < hi) {
    const int64_t mid = (lo + hi) / 2;
    if (at(mid).tick < tick) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  if (lo == num_ticks_) return at(num_ticks_ - 1).at_ns;  // after the last mark: now-ish
  return at(lo).at_ns;
}

}  // namespace pagoda::engine
