// SharedPool: one KV tier that every simulated instance of a cluster replay sees (the global
// pool of `--global-pool-tokens`, with a shared Redis tier's semantics: any instance's committed
// block is there for every other). It is one real kvcache::HostTier (records put, looked up,
// read back and verified) behind a client per instance: each client is a kvcache::Tier that
// forwards its ops to the shared tier and returns, from poll, only the completions of its own
// ops (the others wait in their client's queue). The pool is the bottom tier: what it evicts
// is dropped, so the eviction and removed callbacks a TierStack sets on a client are ignored.
// Single-threaded (the replay's loop), like the tiers it wraps.
#pragma once

#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/clock.h"
#include "kvcache/host_tier.h"

namespace pagoda::sim {

class SharedPool {
 public:
  // `name`: what its clients call themselves ("global" in cluster mode, "remote" below cache
  // mode's tiers).
  static Result<std::unique_ptr<SharedPool>> create(const kvcache::KvLayout& layout, int64_t capacity_blocks,
                                                    kvcache::EvictionPolicyKind eviction, const Clock& clock,
                                                    std::string name = "global");
  // A tier for one instance's TierStack; it must not outlive this pool.
  std::unique_ptr<kvcache::Tier> client();
  int64_t capacity_blocks() const { return tier_->num_slots(); }
  kvcache::TierStats stats() const { return tier_->stats(); }

 private:
  class Client;
  SharedPool(std::unique_ptr<kvcache::HostTier> tier, std::string name) : tier_(std::move(tier)), name_(std::move(name)) {}
  kvcache::TierOpId track(int client, kvcache::TierOpId op);
  void poll_for(int client, std::vector<kvcache::TierCompletion>& out);

  std::unique_ptr<kvcache::HostTier> tier_;
  std::string name_;
  std::unordered_map<kvcache::TierOpId, int> owner_;                // op in flight -> client
  std::vector<std::vector<kvcache::TierCompletion>> queues_;        // [clients] completions not yet taken
  std::vector<kvcache::TierCompletion> scratch_;
};

}  // namespace pagoda::sim
