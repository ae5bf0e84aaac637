// The objects behind include/pagoda/kv_cache.h's opaque handles and the helpers every entry
// point uses (kv_cache.cpp: pool, sequences, matches; kv_tiers.cpp: tiers below the pool).
//
// Teardown order (pagoda_kv_destroy): live matches (they pin), the tier stack (after its puts
// have completed; it listens to the manager), the manager (frees every sequence), the pool.
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "core/clock.h"
#include "core/log.h"
#include "kvcache/block_manager.h"
#include "kvcache/tier_stack.h"
#include "pagoda/kv_cache.h"

struct pagoda_kv_match {
  pagoda::kvcache::PrefixMatch match;
};

struct pagoda_kv_cache {
  std::mutex mutex;
  std::unique_ptr<pagoda::kvcache::BlockPool> pool;
  std::unique_ptr<pagoda::kvcache::BlockManager> manager;
  struct Seq {
    pagoda::kvcache::KvNamespace ns;
  };
  std::unordered_map<pagoda::kvcache::SeqId, Seq> seqs;
  std::unordered_set<pagoda_kv_match*> live_matches;
  std::vector<pagoda::kvcache::BlockCopy> copies;  // scratch of one append
  // Tiers (kv_tiers.cpp): null until the first pagoda_kv_tier_attach.
  pagoda::SteadyClock clock;
  pagoda::Logger logger{pagoda::LogLevel::kError, stderr};
  std::unique_ptr<pagoda::kvcache::TierStack> tiers;
};

namespace pagoda::capi {

inline thread_local std::string last_error;

inline pagoda_kv_status fail(pagoda_kv_status status, std::string message) {
  last_error = std::move(message);
  return status;
}
inline pagoda_kv_status invalid(std::string message) { return fail(PAGODA_KV_INVALID_ARGUMENT, std::move(message)); }

inline kvcache::KvNamespace to_ns(const pagoda_kv_namespace* ns) {
  return ns == nullptr ? kvcache::KvNamespace{} : kvcache::KvNamespace{ns->model_fingerprint, ns->kv_format, ns->cache_salt};
}

// Runs body under the cache's lock; exceptions become PAGODA_KV_INTERNAL.
template <typename Body>
pagoda_kv_status guarded(pagoda_kv_cache* cache, Body&& body) {
  if (cache == nullptr) return invalid("cache is NULL");
  try {
    std::lock_guard<std::mutex> lock(cache->mutex);
    last_error.clear();
    return body();
  } catch (const std::exception& e) {
    return fail(PAGODA_KV_INTERNAL, std::string("internal error: ") + e.what());
  } catch (...) {
    return fail(PAGODA_KV_INTERNAL, "internal error");
  }
}

inline pagoda_kv_status find_seq(pagoda_kv_cache* cache, pagoda_kv_seq seq) {
  if (cache->seqs.count(seq) == 0) return fail(PAGODA_KV_NOT_FOUND, "unknown sequence " + std::to_string(seq));
  return PAGODA_KV_OK;
}

// Polls the tier stack until no put is in flight (every offloaded block is visible to lookups).
void settle_tiers(pagoda_kv_cache* cache);

}  // namespace pagoda::capi
