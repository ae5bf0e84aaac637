// The remote KV tier of `pagoda serve` and `pagoda run` (--kv-remote URL, repeatable;
// --kv-remote-compress; --kv-remote-ttl): a store::RedisTier appended below host and disk.
//
// Policy. The remote tier is write-through: every committed full block is put at once (the
// step thread only copies it; the tier's I/O thread sends it), so another instance pointed at
// the same Redis finds a prefix as soon as this one has computed it, not only after this one's
// pool and local tiers evict it. Reads happen on admission through the tier stack's async probe
// and load (never on the step thread). A block another tier above already holds is loaded from
// there. Redis faults are misses (recompute): the tier's health probes re-enable it once a
// probe round-trips (store/redis_tier.h).
//
// Metrics. The generic per-tier series (server/prometheus.cpp) carry tier="remote"; the Redis
// counters (lookups, misses, shard health, timeouts, redirects, codec bytes and CPU, the
// compression ratio) are appended to /metrics by append_kv_remote_metrics, same label.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/clock.h"
#include "core/log.h"
#include "core/status.h"
#include "kvcache/tier.h"

namespace pagoda::engine {
class Engine;
}
namespace pagoda::store {
class RedisTier;
}

namespace pagoda::tools {

struct KvRemoteOptions {
  std::vector<std::string> urls;  // redis://HOST:PORT (several: sharded) or redis+cluster://SEED
  std::string compress = "none";  // none | lz4 | zstd
  int64_t ttl_s = 0;              // 0: keys never expire (Redis's maxmemory policy evicts)
  int64_t timeout_ms = 1000;      // one Redis call; connect: half of it
};

void add_kv_remote_options(CLI::App& app, KvRemoteOptions& options);
// The tier for `engine` (its layout, model fingerprint, KV format), or null without --kv-remote.
// An unreachable Redis is no error (the tier starts down and is probed); a bad URL is.
Result<std::unique_ptr<kvcache::Tier>> make_kv_remote_tier(const KvRemoteOptions& options, const engine::Engine& engine,
                                                           const Clock& clock, const Logger& logger);
// The engine's remote tier once attached (null: none).
const store::RedisTier* find_kv_remote_tier(const engine::Engine& engine);
// Appends the Redis counters of `tier` (tier="remote") in Prometheus text to `out`.
void append_kv_remote_metrics(const store::RedisTier& tier, std::string& out);

}  // namespace pagoda::tools
