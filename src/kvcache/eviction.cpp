#include "kvcache/eviction.h"

#include <iterator>
#include <tuple>
#include <utility>

#include "core/check.h"

namespace pagoda::kvcache {
namespace {

constexpr std::string_view kNames[] = {"lru", "lfu", "priority"};

// Smaller key = evicted first.
struct Key {
  uint64_t primary = 0;
  uint64_t secondary = 0;
  int32_t block = 0;
  bool operator<(const Key& o) const {
    return std::tie(primary, secondary, block) < std::tie(o.primary, o.secondary, o.block);
  }
};

// An indexed min-heap of candidate blocks; subclasses only say how a block is ranked.
class HeapPolicy : public EvictionPolicy {
 public:
  explicit HeapPolicy(int64_t num_blocks) : pos_(static_cast<size_t>(num_blocks), -1) {
    heap_.reserve(static_cast<size_t>(num_blocks));
  }

  void add(int32_t block, const BlockUsage& usage) override {
    CHECK(!contains(block)) << "block " << block << " is already an eviction candidate";
    Key key = rank(usage);
    key.block = block;
    heap_.push_back(key);
    pos_[block] = static_cast<int32_t>(heap_.size() - 1);
    sift_up(heap_.size() - 1);
  }

  void remove(int32_t block) override {
    CHECK(contains(block)) << "block " << block << " is not an eviction candidate";
    const size_t i = static_cast<size_t>(pos_[block]);
    pos_[block] = -1;
    const Key last = heap_.back();
    heap_.pop_back();
    if (i == heap_.size()) return;
    heap_[i] = last;
    pos_[last.block] = static_cast<int32_t>(i);
    sift_down(i);
    sift_up(static_cast<size_t>(pos_[last.block]));
  }

  bool contains(int32_t block) const override {
    CHECK(block >= 0 && static_cast<size_t>(block) < pos_.size()) << "block " << block;
    return pos_[block] >= 0;
  }
  std::optional<int32_t> victim() const override {
    if (heap_.empty()) return std::nullopt;
    return heap_.front().block;
  }
  int64_t size() const override { return static_cast<int64_t>(heap_.size()); }

 protected:
  virtual Key rank(const BlockUsage& usage) const = 0;

 private:
  void swap_at(size_t a, size_t b) {
    std::swap(heap_[a], heap_[b]);
    pos_[heap_[a].block] = static_cast<int32_t>(a);
    pos_[heap_[b].block] = static_cast<int32_t>(b);
  }
  void sift_up(size_t i) {
    while (i > 0 && heap_[i] < heap_[(i - 1) / 2]) {
      swap_at(i, (i - 1) / 2);
      i = (i - 1) / 2;
    }
  }
  void sift_down(size_t i) {
    for (;;) {
      size_t smallest = i;
      for (size_t c = 2 * i + 1; c <= 2 * i + 2 && c < heap_.size(); ++c) {
        if (heap_[c] < heap_[smallest]) smallest = c;
      }
      if (smallest == i) return;
      swap_at(i, smallest);
      i = smallest;
    }
  }

  std::vector<Key> heap_;     // [size()] min-heap
  std::vector<int32_t> pos_;  // [num_blocks] index in heap_, -1 when not a candidate
};

class LruPolicy final : public HeapPolicy {
 public:
  using HeapPolicy::HeapPolicy;
  EvictionPolicyKind kind() const override { return EvictionPolicyKind::kLru; }
  Key rank(const BlockUsage& u) const override { return {u.last_access, 0, 0}; }
};

class LfuPolicy final : public HeapPolicy {
 public:
  using HeapPolicy::HeapPolicy;
  EvictionPolicyKind kind() const override { return EvictionPolicyKind::kLfu; }
  Key rank(const BlockUsage& u) const override { return {u.num_accesses, u.last_access, 0}; }
};

class PriorityPolicy final : public HeapPolicy {
 public:
  using HeapPolicy::HeapPolicy;
  EvictionPolicyKind kind() const override { return EvictionPolicyKind::kPriority; }
  Key rank(const BlockUsage& u) const override {
    // Order-preserving map of int32 onto uint64.
    return {static_cast<uint64_t>(static_cast<int64_t>(u.priority) + (int64_t{1} << 31)), u.last_access, 0};
  }
};

}  // namespace

std::string_view eviction_policy_name(EvictionPolicyKind kind) { return kNames[static_cast<int>(kind)]; }

std::optional<EvictionPolicyKind> eviction_policy_from_name(std::string_view name) {
  for (size_t i = 0; i < std::size(kNames); ++i) {
    if (kNames[i] == name) return static_cast<EvictionPolicyKind>(i);
  }
  return std::nullopt;
}

std::unique_ptr<EvictionPolicy> make_eviction_policy(EvictionPolicyKind kind, int64_t num_blocks) {
  CHECK_GT(num_blocks, 0);
  switch (kind) {
    case EvictionPolicyKind::kLru: return std::make_unique<LruPolicy>(num_blocks);
    case EvictionPolicyKind::kLfu: return std::make_unique<LfuPolicy>(num_blocks);
    case EvictionPolicyKind::kPriority: return std::make_unique<PriorityPolicy>(num_blocks);
  }
  CHECK(false) << "unknown eviction policy " << static_cast<int>(kind);
  return nullptr;
}

}  // namespace pagoda::kvcache
