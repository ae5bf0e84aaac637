// KvHistory: the bounded memory of the KV cache's recent past that the explain API needs and the
// block manager does not keep: which block hashes were evicted and when, which namespaces
// (model, KV format, cache salt) stored blocks lately, and what wall time each logical tick of
// the block manager's clock was (so a block's last use can be told in seconds).
//
// It listens to the block manager (BlockEventListener, kvcache/block_events.h) on the step
// thread and is read on the same thread (introspection runs between steps). Everything is sized
// once at construction; recording never allocates:
//   evictions   a direct-mapped table of kEvictionSlots (hash, time) entries: a later eviction
//               whose slot collides replaces the older one (a lossy, bounded record; a lost
//               entry reads as "never seen", which explain says may mean "evicted long ago").
//   namespaces  the kMaxNamespaces most recently seen, least recently seen replaced first.
//   ticks       (logical tick, time) at the end of each of the last kTickRing steps.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "core/clock.h"
#include "kvcache/block_events.h"

namespace pagoda::engine {

class KvHistory final : public kvcache::BlockEventListener {
 public:
  static constexpr int64_t kEvictionSlots = int64_t{1} << 16;
  static constexpr int kMaxNamespaces = 16;
  static constexpr int64_t kTickRing = 4096;

  explicit KvHistory(const Clock& clock);

  void on_blocks_stored(std::span<const kvcache::BlockInfo> chain) override;
  void on_block_evicted(const kvcache::BlockInfo& block) override;

  // When the block of this hash was last evicted (clock ns), if the record still has it.
  std::optional<int64_t> evicted_at_ns(kvcache::BlockHash hash) const;
  int64_t num_evictions_seen() const { return num_evictions_; }

  struct SeenNamespace {
    kvcache::KvNamespace ns;
    int64_t last_stored_ns = 0;
    int64_t blocks_stored = 0;
  };
  // Most recent first.
  std::vector<SeenNamespace> namespaces() const;

  // The block manager's logical clock read `tick` at clock time now_ns (call once per step).
  void mark_tick(uint64_t tick, int64_t now_ns);
  // The clock time of the first recorded step whose tick is >= `tick`; nullopt when the tick
  // is older than the ring (or no step was marked yet).
  std::optional<int64_t> time_of_tick(uint64_t tick) const;

 private:
  struct Eviction {
    kvcache::BlockHash hash = 0;
    int64_t at_ns = -1;  // -1: empty slot
  };
  struct Tick {
    uint64_t tick = 0;
    int64_t at_ns = 0;
  };

  const Clock& clock_;
  std::vector<Eviction> evictions_;                     // [kEvictionSlots], slot = hash & mask
  std::array<SeenNamespace, kMaxNamespaces> namespaces_{};
  int num_namespaces_ = 0;
  std::vector<Tick> ticks_;                             // [kTickRing] ring, oldest at ticks_head_
  int64_t ticks_head_ = 0, num_ticks_ = 0;
  int64_t num_evictions_ = 0;
};

}  // namespace pagoda::engine
