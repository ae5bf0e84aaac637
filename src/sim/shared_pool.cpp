#include "sim/shared_pool.h"

#include "kvcache/block_record.h"

namespace pagoda::sim {

class SharedPool::Client final : public kvcache::Tier {
 public:
  Client(SharedPool& pool, int id) : pool_(pool), id_(id) {}
  std::string_view name() const override { return pool_.name_; }
  std::string_view medium() const override { return "REDIS"; }
  std::string_view memory() const override { return "shared pool"; }
  bool enabled() const override { return true; }
  kvcache::TierOpId lookup(std::span<const kvcache::BlockHash> chain) override {
    return pool_.track(id_, pool_.tier_->lookup(chain));
  }
  kvcache::TierOpId put(std::span<const kvcache::TierPut> blocks) override {
    return pool_.track(id_, pool_.tier_->put(blocks));
  }
  kvcache::TierOpId get(std::span<const kvcache::TierGet> blocks) override {
    return pool_.track(id_, pool_.tier_->get(blocks));
  }
  void erase(std::span<const kvcache::BlockHash> hashes) override { pool_.tier_->erase(hashes); }
  void poll(std::vector<kvcache::TierCompletion>& out) override { pool_.poll_for(id_, out); }
  kvcache::TierStats stats() const override { return pool_.tier_->stats(); }
  void set_eviction_callback(kvcache::TierEvictionCallback) override {}  // the bottom tier: dropped
  void set_removed_callback(kvcache::TierRemovedCallback) override {}

 private:
  SharedPool& pool_;
  int id_;
};

Result<std::unique_ptr<SharedPool>> SharedPool::create(const kvcache::KvLayout& layout, int64_t capacity_blocks,
                                                       kvcache::EvictionPolicyKind eviction, const Clock& clock,
                                                       std::string name) {
  if (capacity_blocks < 1) return Status::invalid_argument("the global pool holds no block");
  kvcache::HostTierOptions o;
  o.layout = layout;
  o.eviction = eviction;
  const int64_t record = kvcache::record_bytes(kvcache::record_meta_for(layout));
  o.capacity_bytes = capacity_blocks * ((record + kvcache::kRecordAlign - 1) / kvcache::kRecordAlign * kvcache::kRecordAlign);
  PAGODA_ASSIGN_OR_RETURN(std::unique_ptr<kvcache::HostTier> tier, kvcache::HostTier::create(o, clock));
  return std::unique_ptr<SharedPool>(new SharedPool(std::move(tier), std::move(name)));
}

std::unique_ptr<kvcache::Tier> SharedPool::client() {
  queues_.emplace_back();
  return std::make_unique<Client>(*this, static_cast<int>(queues_.size()) - 1);
}

kvcache::TierOpId SharedPool::track(int client, kvcache::TierOpId op) {
  owner_[op] = client;
  return op;
}

void SharedPool::poll_for(int client, std::vector<kvcache::TierCompletion>& out) {
  scratch_.clear();
  tier_->poll(scratch_);
  for (kvcache::TierCompletion& c : scratch_) {
    auto it = owner_.find(c.op);
    CHECK(it != owner_.end()) << "a completion of the shared pool nobody submitted: op " << c.op;
    queues_[static_cast<size_t>(it->second)].push_back(std::move(c));
    owner_.erase(it);
  }
  std::vector<kvcache::TierCompletion>& mine = queues_[static_cast<size_t>(client)];
  for (kvcache::TierCompletion& c : mine) out.push_back(std::move(c));
  mine.clear();
}

}  // namespace pagoda::sim
