// UcxAgent: one instance's endpoint for KV block transfer over UCX (ucp API), as NIXL's UCX
// backend does it: the pool's memory is registered once (ucp_mem_map) and its rkey handed to
// peers in a handshake; blocks move by one-sided ucp_get_nbx, the decode side PULLING from the
// prefill side's registered pool straight into its own blocks (no staging copy on either side);
// control messages are active messages (transfer/wire.h).
//
// Protocol of one pull (decode side = client, prefill side = server, listening on host:port):
//   1. once per peer: connect (ucp_ep_create to the sockaddr), kHello -> kDescriptor (layout,
//      model, KV format, block addresses, rkey); an incompatible peer is refused (no bytes move);
//   2. one get per run of consecutive blocks per layer and K/V, into the caller's blocks;
//   3. kConfirm(lease, block refs with generations) -> kConfirmReply: only an ok reply makes the
//      bytes usable (validate after read: transfer/lease_table.h). The caller must hold its
//      destination blocks unreadable by anyone until pull() returns, whatever it returns.
//
// Threads: every UCX call runs on the agent's own progress thread (started by create(), a
// UCS_THREAD_MODE_SINGLE worker), never on the engine's step thread. pull() may be called from
// any thread; it queues the work and blocks until the progress thread finishes it: the deadline
// is enforced there (a timed-out pull force-closes its endpoint, which completes every get in
// flight), so when pull() returns no byte will be written into the destination any more.
// The progress thread spins while work is in flight and sleeps 1 ms between polls when idle.
//
// Transports: chosen by UCX from its environment (ucp_config_read) and UcxAgentConfig's
// ucx_options on top: UCX_TLS=tcp,self UCX_NET_DEVICES=lo (gets emulated over active messages), or
// UCX_TLS=sm,self,tcp (the sockaddr listener's connection manager is tcp; the gets take the
// sysv/posix shared-memory lanes: the agent turns on their peer-failure handling, which UCX
// 1.13 requires for endpoints that handle peer failure). posix/sysv need a shared /dev/shm
// (and IPC namespace) between the two processes.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/clock.h"
#include "core/log.h"
#include "core/status.h"
#include "transfer/lease_table.h"
#include "transfer/pool_memory.h"

namespace pagoda::transfer {

struct UcxAgentConfig {
  std::string host = "127.0.0.1";   // the listener's address (an IPv4 literal)
  int port = 0;                     // 0: any free port
  // UCX settings over its environment's (ucp_config_modify), names without "UCX_":
  // {"TLS", "tcp,self"}, {"NET_DEVICES", "lo"}. tools/ fills them from flags.
  std::vector<std::pair<std::string, std::string>> ucx_options;
};

// One block to pull: the peer's reference and where it goes here.
struct BlockPull {
  BlockRef remote;
  int32_t local_block = -1;
};

struct PullRequest {
  std::string host;
  int port = 0;
  uint64_t lease_id = 0;
  std::vector<BlockPull> blocks;
  double timeout_s = 5;
};

struct PullResult {
  Status status;
  int64_t bytes = 0;                // pulled (0 unless ok)
  int64_t num_gets = 0;             // get operations issued (runs of consecutive blocks)
  std::string rma_transports;       // the peer endpoint's RMA lanes, e.g. "sysv/memory posix/memory"
  double seconds = 0;
};

struct UcxAgentStats {
  int64_t pulls_ok = 0, pulls_failed = 0;
  int64_t bytes_pulled = 0;
  int64_t confirms_served = 0, descriptors_served = 0;
  int64_t peers_connected = 0;      // server side: endpoints accepted
};

class UcxAgent {
 public:
  // Registers `memory` (its descriptor's rkey is filled in), listens, starts the progress
  // thread. `leases` answers the peers' confirms (may be null: every confirm is refused).
  // Neither is owned; both must outlive the agent.
  static Result<std::unique_ptr<UcxAgent>> create(const UcxAgentConfig& config, PoolMemory memory,
                                                  LeaseTable* leases, const Clock& clock, const Logger& logger);
  virtual ~UcxAgent() = default;  // stops the thread, closes endpoints, unregisters

  virtual int port() const = 0;
  virtual const std::string& host() const = 0;
  virtual const PoolDescriptor& descriptor() const = 0;
  // Thread-safe; blocks until the pull has finished (ok or not), at most about timeout_s.
  virtual PullResult pull(const PullRequest& request) = 0;
  virtual UcxAgentStats stats() const = 0;
};

}  // namespace pagoda::transfer
