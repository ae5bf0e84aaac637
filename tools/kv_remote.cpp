// --kv-remote: flags, the RedisTier for an engine, its start-up line and its /metrics families
// (policy: tools/kv_remote.h).
#include "tools/kv_remote.h"

#include <unistd.h>

#include "engine/engine.h"
#include "kvcache/block_record.h"
#include "kvcache/kv_layout.h"
#include "server/http/prometheus_text.h"
#include "store/redis_tier.h"

namespace pagoda::tools {

void add_kv_remote_options(CLI::App& app, KvRemoteOptions& o) {
  app.add_option("--kv-remote", o.urls,
                 "shared KV pool on Redis, below host and disk: redis://HOST:PORT (repeatable: blocks sharded over "
                 "the servers) or redis+cluster://HOST:PORT (a Redis Cluster seed); every committed block is written "
                 "through, prefixes are loaded on admission; a dead Redis is a miss, never an error");
  app.add_option("--kv-remote-compress", o.compress, "compression of the records in Redis: none, lz4, zstd")
      ->check(CLI::IsMember({"none", "lz4", "zstd"}));
  app.add_option("--kv-remote-ttl", o.ttl_s, "seconds a record stays in Redis after its last write (0: no expiry)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 31));
  app.add_option("--kv-remote-timeout-ms", o.timeout_ms, "deadline of one Redis call, ms (a slower one is a miss)")
      ->check(CLI::Range(int64_t{1}, int64_t{600'000}));
}

Result<std::unique_ptr<kvcache::Tier>> make_kv_remote_tier(const KvRemoteOptions& o, const engine::Engine& eng,
                                                           const Clock& clock, const Logger& logger) {
  if (o.urls.empty()) return std::unique_ptr<kvcache::Tier>();
  store::RedisTierConfig c;
  Result<store::RedisTopology> topology = store::parse_redis_urls(o.urls);
  if (!topology.is_ok()) return topology.status().with_context("--kv-remote");
  c.topology = std::move(topology).value();
  Result<store::RedisCompression> compression = store::parse_redis_compression(o.compress);
  if (!compression.is_ok()) return compression.status().with_context("--kv-remote-compress");
  c.compression = *compression;
  c.layout = eng.kv_layout();
  c.model_fingerprint = eng.model_fingerprint();
  c.kv_format = eng.kv_format_key();
  c.ttl_seconds = o.ttl_s;
  c.timeouts.io_ms = o.timeout_ms;
  c.timeouts.connect_ms = std::max<int64_t>(1, o.timeout_ms / 2);
  c.instance_nonce = static_cast<uint64_t>(getpid()) ^ static_cast<uint64_t>(SteadyClock().now_ns());
  Result<std::unique_ptr<store::RedisTier>> tier = store::RedisTier::create(std::move(c), &clock);
  if (!tier.is_ok()) return tier.status().with_context("--kv-remote");
  const store::RedisTier& t = **tier;
  std::string servers;
  for (const std::string& url : o.urls) servers += (servers.empty() ? "" : ", ") + url;
  const store::RedisTierConfig& cfg = t.config();
  const int64_t bytes = kvcache::record_bytes(kvcache::record_meta_for(cfg.layout));
  std::string line = "remote tier: " + servers + (cfg.topology.cluster ? " (Redis Cluster)" : "") + ", records of " +
                     kvcache::format_bytes(bytes) + " per " + std::to_string(cfg.layout.block_size) +
                     "-token block, compress " + o.compress + ", ttl " +
                     (o.ttl_s > 0 ? std::to_string(o.ttl_s) + " s" : std::string("none")) +
                     ", write-through, timeout " + std::to_string(o.timeout_ms) + " ms";
  if (t.enabled()) {
    logger.info(line + ": up");
  } else {
    logger.warn(line + ": down (" + t.disabled_reason() + "), misses until a health probe reaches it");
  }
  return std::unique_ptr<kvcache::Tier>(std::move(tier).value());
}

const store::RedisTier* find_kv_remote_tier(const engine::Engine& eng) {
  const kvcache::TierStack* tiers = eng.tiers();
  if (tiers == nullptr) return nullptr;
  for (int t = 0; t < tiers->num_tiers(); ++t) {
    if (const auto* redis = dynamic_cast<const store::RedisTier*>(&tiers->tier(t))) return redis;
  }
  return nullptr;
}

namespace {

void family(std::string& out, const char* name, const char* type, const char* help, double value) {
  http::prometheus_header(out, name, type, help);
  http::prometheus_sample(out, std::string(name) + "{tier=\"remote\"}", value);
}

}  // namespace

void append_kv_remote_metrics(const store::RedisTier& tier, std::string& out) {
  const kvcache::TierStats s = tier.stats();
  const store::RedisTierStats r = tier.redis_stats();
  const auto d = [](int64_t v) { return static_cast<double>(v); };
  family(out, "pagoda_kv_remote_lookups_total", "counter", "Lookups (pipelined EXISTS) sent to Redis.", d(s.lookups));
  family(out, "pagoda_kv_remote_lookup_hit_blocks_total", "counter", "Blocks Redis held when looked up.",
         d(s.lookup_hit_blocks));
  family(out, "pagoda_kv_remote_get_blocks_total", "counter", "Blocks read (GET) from Redis.", d(s.get_blocks));
  family(out, "pagoda_kv_remote_get_failures_total", "counter",
         "Blocks whose read failed (missing, corrupt, fault, shard down): recomputed.", d(s.get_failures));
  family(out, "pagoda_kv_remote_missing_records_total", "counter",
         "GETs that found no value (evicted by Redis, expired).", d(r.missing_records));
  family(out, "pagoda_kv_remote_put_blocks_total", "counter", "Blocks handed to the tier to write.", d(s.put_blocks));
  const int64_t record = kvcache::record_bytes(kvcache::record_meta_for(tier.config().layout));
  family(out, "pagoda_kv_remote_written_blocks_total", "counter", "Blocks Redis acknowledged (SET answered OK).",
         d(record > 0 ? r.raw_bytes_written / record : 0));
  family(out, "pagoda_kv_remote_put_failures_total", "counter", "Blocks whose write failed.", d(s.put_failures));
  family(out, "pagoda_kv_remote_put_skipped_existing_total", "counter", "Blocks Redis already held (refreshed, not sent).",
         d(r.put_skipped_existing));
  family(out, "pagoda_kv_remote_put_rejected_full_total", "counter", "Blocks refused by a full Redis (-OOM).",
         d(r.put_rejected_full));
  family(out, "pagoda_kv_remote_put_rejected_backpressure_total", "counter",
         "Blocks refused because too many bytes were still waiting to be sent.", d(r.put_rejected_backpressure));
  family(out, "pagoda_kv_remote_items_while_down_total", "counter",
         "Items answered at once as misses because their Redis shard was down.", d(r.items_while_down));
  family(out, "pagoda_kv_remote_errors_total", "counter", "Connection and I/O faults (a shard marked down).",
         d(r.shards.faults));
  family(out, "pagoda_kv_remote_timeouts_total", "counter", "Faults that were timeouts.", d(r.shards.timeouts));
  family(out, "pagoda_kv_remote_connects_total", "counter", "TCP connections made to Redis.", d(r.shards.connects));
  family(out, "pagoda_kv_remote_redirects_total", "counter", "MOVED and ASK redirects followed (Redis Cluster).",
         d(r.shards.moved_redirects + r.shards.ask_redirects));
  family(out, "pagoda_kv_remote_probes_total", "counter", "Health probes run.", d(r.probes));
  family(out, "pagoda_kv_remote_probe_failures_total", "counter", "Health probes that failed.", d(r.probe_failures));
  family(out, "pagoda_kv_remote_recoveries_total", "counter", "Shards re-enabled by a probe that round-tripped.",
         d(r.recoveries));
  family(out, "pagoda_kv_remote_shards_down", "gauge", "Redis shards (servers, or the cluster) down now.",
         d(r.shards_down));
  family(out, "pagoda_kv_remote_up", "gauge", "1 while some Redis shard serves, 0 while all are down.",
         tier.enabled() ? 1 : 0);
  family(out, "pagoda_kv_remote_raw_written_bytes_total", "counter", "Record bytes written, before compression.",
         d(r.raw_bytes_written));
  family(out, "pagoda_kv_remote_raw_read_bytes_total", "counter", "Record bytes read, after decompression.",
         d(r.raw_bytes_read));
  family(out, "pagoda_kv_remote_compression_ratio", "gauge",
         "Record bytes before compression / bytes sent to Redis (1 without compression or writes).",
         s.bytes_written > 0 ? static_cast<double>(r.raw_bytes_written) / static_cast<double>(s.bytes_written) : 1.0);
  family(out, "pagoda_kv_remote_compress_seconds_total", "counter", "CPU time compressing records (I/O thread).",
         static_cast<double>(r.compress_ns) * 1e-9);
  family(out, "pagoda_kv_remote_decompress_seconds_total", "counter", "CPU time decompressing records (I/O thread).",
         static_cast<double>(r.decompress_ns) * 1e-9);
  family(out, "pagoda_kv_remote_io_seconds_total", "counter", "Wall time of the tier's executed Redis operations.",
         static_cast<double>(r.io_ns) * 1e-9);
}

}  // namespace pagoda::tools
