// PdCoordinator: prefill/decode disaggregation on one ServingEngine (`pagoda serve --role`).
//
// Prefill side (role prefill or both): the router's prompt runs as a request with park_kv
// (engine/serving.h): when it ends, its block-manager sequence is kept, every block of the
// prompt's KV with the partly filled last one. lend() takes that sequence and leases its
// blocks (transfer/lease_table.h; the sequence holds them, so they are never evicted and never
// rewritten), answering the handshake record (transfer/kv_transfer_params.h; remote_num_tokens
// = the prompt's length). Without a parked sequence (the request was not parked) it leases the
// prompt's cached full blocks instead (pinned by a PrefixMatch). The lease ends when the decode
// side confirms its read, or expires after lease_s (the reaper thread then frees the sequence:
// its full blocks stay cached, evictable again, the tail is freed; or drops the pins).
//
// Decode side (role decode or both): import() runs before the request is submitted. It matches
// the prompt in the local prefix cache, takes fresh blocks for the rest of the KV of every
// prompt token but the last (a private sequence of the block manager, invisible to every other
// request: not committed), pulls the lent blocks over UCX straight into those blocks
// (transfer/ucx_agent.h, on the agent's thread), and only after the prefill side confirmed the
// lease commits them (the full blocks enter the prefix cache). The sequence is handed to the
// request (ImportOutcome::sequence -> CompletionRequest::adopt_kv): admitted onto it, the
// engine computes nothing but the last prompt token. Any failure (malformed params, another
// model or layout, no free blocks, a refused, failed or timed-out pull) frees the blocks
// uncommitted and the request computes its prompt here: a fallback, never an error.
//
// Ownership: a parked sequence is lend()'s or, if the reply is not sent, drop_parked()'s; an
// imported sequence is the caller's until an accepted submit takes it (release() frees it
// otherwise).
//
// Threads: lend/import block the calling HTTP thread (never the step thread): their block
// manager work runs on the loop thread through ServingEngine::with_block_manager; bytes move on
// the agent's progress thread. The reaper thread wakes at the next expiry or every 20 ms.
// Destroy before the ServingEngine (the lent sequences and pins belong to its block manager).
#pragma once

#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <unordered_map>

#include "engine/serving.h"
#include "transfer/kv_transfer_params.h"
#include "transfer/lease_table.h"
#include "transfer/ucx_agent.h"

namespace pagoda::engine {

enum class PdRole { kBoth, kPrefill, kDecode };
const char* pd_role_name(PdRole role);
std::optional<PdRole> pd_role_from_name(std::string_view name);

struct PdConfig {
  PdRole role = PdRole::kBoth;
  std::string engine_id;               // remote_engine_id in the handshake
  double lease_s = 30;                 // vLLM's kv_lease_duration
  double transfer_timeout_s = 10;      // one pull, handshake included
  transfer::UcxAgentConfig ucx;
};

struct PdStats {
  transfer::LeaseStats leases;
  int64_t lent_blocks = 0;             // blocks named by granted leases
  int64_t imports_ok = 0;              // pulls that landed in the prefix cache
  int64_t imports_fallback = 0;        // requests that computed their prompt here instead
  int64_t imported_blocks = 0, imported_bytes = 0;
  int64_t local_hit_blocks = 0;        // lent blocks found already cached here (not pulled)
  double transfer_seconds = 0;         // summed over successful pulls
  std::string last_fallback;           // why the last fallback happened
  std::string last_transports;         // the UCX transports of the last pull's gets ("tcp/lo", "sysv/memory ...")
};

struct ImportOutcome {
  bool imported = false;               // false: fell back (reason says why)
  std::string reason;
  int64_t blocks_pulled = 0, bytes = 0, cached_tokens = 0;
  kvcache::SeqId sequence = -1;        // imported: the KV to adopt (-1: all was cached here already)
  double seconds = 0;
  std::string transports;              // the UCX transports the gets took (PullResult::rma_transports)
};

class PdCoordinator {
 public:
  static Result<std::unique_ptr<PdCoordinator>> create(ServingEngine& serving, const PdConfig& config,
                                                       const Clock& clock, const Logger& logger);
  ~PdCoordinator();  // stops the reaper, ends every lease (drops its pins), stops the agent

  PdRole role() const { return config_.role; }
  bool lends() const { return config_.role != PdRole::kDecode; }
  bool imports() const { return config_.role != PdRole::kPrefill; }
  // Prefill side, after request `request` (park_kv) ended: lease its parked KV (or the
  // prompt's cached full blocks; none when nothing is cached).
  transfer::KvTransferParams lend(std::span<const int32_t> prompt, const std::string& cache_salt,
                                  RequestId request);
  // Prefill side: frees what request `request` parked (its reply is not sent: no lend).
  void drop_parked(RequestId request);
  // Decode side: pull the lent blocks, or say why not. table_tokens: the block table the
  // request will need (prompt + max tokens).
  ImportOutcome import(std::span<const int32_t> prompt, const std::string& cache_salt,
                       const transfer::KvTransferParams& params, int64_t table_tokens);
  // Decode side: frees an imported sequence no request took (submit refused it).
  void release(kvcache::SeqId imported);
  PdStats stats() const;
  int transfer_port() const { return agent_->port(); }

 private:
  PdCoordinator(ServingEngine& serving, const PdConfig& config, const Clock& clock, const Logger& logger);
  kvcache::KvNamespace ns_for(const std::string& cache_salt) const;
  void reap_loop();
  void reap();                          // drops the pins of ended leases (on the loop thread)
  ImportOutcome fall_back(std::string reason);
  // serving_.with_block_manager, one call at a time (after the loop has ended the calls run on
  // their callers' threads: this keeps them apart).
  void on_loop(const std::function<void(kvcache::BlockManager&)>& fn);

  ServingEngine& serving_;
  PdConfig config_;
  const Clock& clock_;
  const Logger& logger_;
  std::unique_ptr<transfer::LeaseTable> leases_;
  std::unique_ptr<transfer::UcxAgent> agent_;
  // Loop thread only (inside with_block_manager): what holds the blocks of each live lease.
  struct Lent {
    kvcache::PrefixMatch match;        // cached full blocks, or
    kvcache::SeqId seq = -1;           // a parked sequence (freed when the lease is reaped)
  };
  using LentMap = std::unordered_map<uint64_t, Lent>;
  LentMap pins_;
  // Ends one lease's hold on the loop thread: frees its parked sequence or drops its pins.
  LentMap::iterator end_lent(kvcache::BlockManager& bm, LentMap::iterator it);
  std::vector<int64_t> slots_;          // append scratch
  std::vector<kvcache::BlockCopy> copies_;
  std::mutex loop_mutex_;

  mutable std::mutex mutex_;
  std::condition_variable wake_;
  bool stopping_ = false;
  PdStats stats_;                       // without leases (read from the table)
  std::thread reaper_;
};

}  // namespace pagoda::engine
