// FakeTier: a kvcache::Tier for tests whose completions the test injects. Records are kept
// encoded (block_record.h) in a map, so gets verify them as a real tier does; lookups and gets
// wait in a queue until the test completes them (complete_next / complete_all), so every
// interleaving of the step loop and I/O can be driven deterministically. Puts store at once and
// complete at the next poll (what a put does later is the real tiers' business). Faults are injected per hash
// (corrupt: flip a payload byte; fail_get: the get fails with an I/O error there) or for the
// whole tier (disable). Capacity: at most `capacity` records, least recently put/got evicted
// first, each victim handed to the eviction callback (its bytes valid during the call).
#pragma once

#include <cstdint>
#include <deque>
#include <list>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "core/check.h"
#include "kvcache/block_record.h"
#include "kvcache/tier.h"

namespace pagoda::kvcache::testing {

class FakeTier final : public Tier {
 public:
  FakeTier(std::string name, const KvLayout& layout, int64_t capacity)
      : name_(std::move(name)), layout_(layout), capacity_(capacity) {
    stats_.capacity_blocks = capacity;
  }

  std::string_view name() const override { return name_; }
  std::string_view medium() const override { return "FAKE"; }
  bool enabled() const override { return enabled_; }
  std::string disabled_reason() const override { return enabled_ ? "" : "injected fault"; }

  TierOpId lookup(std::span<const BlockHash> chain) override {
    ++stats_.lookups;
    Op op{next_op_++, TierOpKind::kLookup};
    op.hashes.assign(chain.begin(), chain.end());
    queue_.push_back(std::move(op));
    return queue_.back().id;
  }
  TierOpId put(std::span<const TierPut> blocks) override {
    ++stats_.puts;
    Op op{next_op_++, TierOpKind::kPut};
    int64_t ok = 0;
    for (const TierPut& b : blocks) {
      if (!enabled_) break;
      if (records_.count(b.meta.block_hash) == 0) {
        std::vector<uint8_t> bytes(static_cast<size_t>(record_bytes(b.meta)));
        encode_block_record(b.meta, b.tokens, b.payload, bytes);
        make_room();
        records_[b.meta.block_hash] = std::move(bytes);
      }
      touch(b.meta.block_hash);
      ++ok;
    }
    op.num_items = static_cast<int64_t>(blocks.size());
    op.num_ok = ok;
    stats_.put_blocks += ok;
    const TierOpId id = op.id;
    run(op);
    return id;
  }
  TierOpId get(std::span<const TierGet> blocks) override {
    ++stats_.gets;
    Op op{next_op_++, TierOpKind::kGet};
    op.gets.assign(blocks.begin(), blocks.end());
    queue_.push_back(std::move(op));
    return queue_.back().id;
  }
  void erase(std::span<const BlockHash> hashes) override {
    for (BlockHash h : hashes) forget(h);
  }
  void poll(std::vector<TierCompletion>& out) override {
    out.insert(out.end(), done_.begin(), done_.end());
    done_.clear();
  }
  TierStats stats() const override {
    TierStats s = stats_;
    s.used_blocks = static_cast<int64_t>(records_.size());
    return s;
  }
  void set_eviction_callback(TierEvictionCallback callback) override { on_evict_ = std::move(callback); }

  // ---- test controls ----
  int64_t num_queued() const { return static_cast<int64_t>(queue_.size()); }
  bool holds(BlockHash hash) const { return records_.count(hash) != 0; }
  int64_t size() const { return static_cast<int64_t>(records_.size()); }
  // Runs the oldest queued op now (its completion comes out of the next poll).
  void complete_next() {
    CHECK(!queue_.empty());
    Op op = std::move(queue_.front());
    queue_.pop_front();
    run(op);
  }
  void complete_all() {
    while (!queue_.empty()) complete_next();
  }
  void corrupt(BlockHash hash) {  // flips a payload byte: the checksum no longer matches
    auto it = records_.find(hash);
    CHECK(it != records_.end());
    it->second.back() ^= 0x40;
  }
  void fail_get(BlockHash hash) { failing_.insert(hash); }
  void disable() { enabled_ = false; }

 private:
  struct Op {
    TierOpId id = 0;
    TierOpKind kind = TierOpKind::kLookup;
    std::vector<BlockHash> hashes;
    std::vector<TierGet> gets;
    int64_t num_items = 0, num_ok = 0;
  };
  void touch(BlockHash h) {
    lru_.remove(h);
    lru_.push_back(h);
  }
  void forget(BlockHash h) {
    records_.erase(h);
    lru_.remove(h);
  }
  void make_room() {
    while (static_cast<int64_t>(records_.size()) >= capacity_ && !lru_.empty()) {
      const BlockHash victim = lru_.front();
      std::vector<uint8_t> bytes = std::move(records_[victim]);
      forget(victim);
      ++stats_.evictions;
      Result<BlockRecordView> view = decode_block_record(bytes);
      if (on_evict_ && view.is_ok()) on_evict_(view.value(), 0);
    }
  }
  void run(Op& op) {
    TierCompletion c{op.id, op.kind, 0, 0, Status::ok(), 0, 0, 0};
    if (op.kind == TierOpKind::kLookup) {
      c.num_items = static_cast<int64_t>(op.hashes.size());
      while (enabled_ && c.num_ok < c.num_items && holds(op.hashes[static_cast<size_t>(c.num_ok)])) ++c.num_ok;
      stats_.lookup_hit_blocks += c.num_ok;
    } else if (op.kind == TierOpKind::kPut) {
      c.num_items = op.num_items;
      c.num_ok = op.num_ok;
    } else {
      c.num_items = static_cast<int64_t>(op.gets.size());
      for (const TierGet& g : op.gets) {
        if (!enabled_) break;
        if (failing_.count(g.hash) != 0) {
          c.status = Status::unavailable("injected I/O error");
          ++stats_.faults;
          break;
        }
        auto it = records_.find(g.hash);
        if (it == records_.end()) break;
        Result<BlockRecordView> view = decode_block_record(it->second);
        Status st = view.is_ok() ? check_block_record(view.value().meta, layout_, g.ns, g.hash) : view.status();
        if (!st.is_ok()) {
          ++stats_.corrupt_records;
          forget(g.hash);
          c.status = st;
          break;
        }
        copy_record_payload(view.value(), g.dest);
        std::copy(view.value().tokens.begin(), view.value().tokens.end(), g.tokens_out.begin());
        c.bytes += view.value().meta.payload_bytes;
        touch(g.hash);
        ++c.num_ok;
      }
      stats_.get_blocks += c.num_ok;
      stats_.get_failures += c.num_items - c.num_ok;
    }
    done_.push_back(c);
  }

  std::string name_;
  KvLayout layout_;
  int64_t capacity_;
  bool enabled_ = true;
  std::map<BlockHash, std::vector<uint8_t>> records_;
  std::list<BlockHash> lru_;  // least recently used first
  std::set<BlockHash> failing_;
  std::deque<Op> queue_;
  std::vector<TierCompletion> done_;
  TierEvictionCallback on_evict_;
  TierStats stats_;
  TierOpId next_op_ = 1;
};

}  // namespace pagoda::kvcache::testing
