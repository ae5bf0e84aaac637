// RedisTier: the shared remote KV pool (kvcache::Tier, policy in kvcache/tier.h) on
// independent Redis servers or one Redis Cluster (store/redis_shards.h), through hiredis.
//
// Keys and values. One key per block: pagoda@<model fingerprint hex>@<kv format>@<block hash hex>
// (e.g. pagoda@9f3c...@f16-nd-b16@00a1...), value = the whole BlockRecord (header + tokens +
// payload, store/record_value.h: optionally lz4/zstd inside an envelope), SET with EX ttl
// when a TTL is set. Every instance of the same model and KV format names a block alike, so a
// prefix computed by one is found by all. The block hash covers the cache salt, so tenants
// never share keys.
//
// Ops (all on the tier's one I/O thread; the caller's thread only copies and queues):
//   lookup  EXISTS per hash, pipelined; num_ok = consecutive held from the first.
//   put     EXISTS first, then SET only the absent ones (TOUCH / EXPIRE refreshes the present
//           ones), pipelined in windows of pipeline_window_bytes. put() copies the tokens and
//           payload before it returns (the tier's policy); puts beyond max_inflight_put_bytes
//           are refused at once (a slow Redis never grows memory without bound).
//   get     GET per block, pipelined in windows; each value is decoded, verified
//           (decode_block_record: sizes, checksum) and checked (check_block_record: shape,
//           format, namespace, hash) before a byte reaches the destination. A record that
//           fails is deleted from Redis and counted in corrupt_records; a key that vanished
//           (Redis evicted it, TTL) counts in missing_records. Either is a miss.
//   erase   DEL, pipelined, no completion.
// Completions come out of poll(); completion_fd() is readable while some wait (for a caller
// that wants to sleep until then, and for tests, which never sleep for correctness).
//
// Faults never fail a request: every call has a deadline (RedisTimeouts); a refused, dead,
// restarted or silent server marks its shard down (its items are misses, counted), and ops for
// a down shard are answered at once without I/O. Health, per shard, on the driving thread:
//
//   up ──fault──▶ down ──probe due (backoff: initial, doubling to max)──▶ probing
//   probing ──probe key SET + GET round-trips identical bytes on every server──▶ up
//   probing ──fails──▶ down (backoff doubled)
//
// Probes are scheduled from submit and poll() by the injected Clock (deterministic in tests),
// and run on the I/O thread. A full Redis (maxmemory, noeviction) answers -OOM: those puts fail
// and count (put_rejected_full), the shard stays up. enabled() is false while no shard is up.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "core/clock.h"
#include "core/status.h"
#include "kvcache/kv_layout.h"
#include "kvcache/tier.h"
#include "store/record_value.h"
#include "store/redis_shards.h"
#include "store/redis_url.h"

namespace pagoda::store {

struct RedisTierConfig {
  RedisTopology topology;
  kvcache::KvLayout layout;          // the pool's; records of any other shape are misses
  uint64_t model_fingerprint = 0;    // with kv_format: the namespace every record must carry
  uint64_t kv_format = 0;
  int64_t ttl_seconds = 0;           // 0: keys never expire (Redis's maxmemory policy evicts)
  RedisCompression compression = RedisCompression::kNone;
  int compression_level = 0;         // zstd level (0: its default 3), lz4 acceleration
  bool shuffle = true;               // split f16/bf16/f32 bytes into planes before compressing
  RedisTimeouts timeouts;
  int max_redirects = 5;
  int64_t probe_backoff_initial_ms = 250;
  int64_t probe_backoff_max_ms = 30'000;
  int64_t max_inflight_put_bytes = int64_t{256} << 20;
  int64_t pipeline_window_bytes = int64_t{8} << 20;
  uint64_t instance_nonce = 0;       // keeps instances' probe keys apart (tools: pid ^ time)
};

// What the Redis tier counts beyond kvcache::TierStats.
struct RedisTierStats {
  RedisShardStats shards;
  int64_t missing_records = 0;        // GET found no value (evicted by Redis, expired)
  int64_t put_skipped_existing = 0;   // already held: refreshed, not sent again
  int64_t put_rejected_full = 0;      // -OOM from a full Redis
  int64_t put_rejected_backpressure = 0;
  int64_t items_while_down = 0;       // items answered at once as misses (shard down)
  int64_t probes = 0, probe_failures = 0, recoveries = 0;
  int64_t raw_bytes_written = 0, raw_bytes_read = 0;  // records before compression
  int64_t compress_ns = 0, decompress_ns = 0;         // CPU time in the codec (I/O thread)
  int64_t io_ns = 0;                                  // wall time of executed ops
  int shards_down = 0;
};

class RedisTier final : public kvcache::Tier {
 public:
  // Validates the config, starts the I/O thread and probes every shard once (bounded by the
  // timeouts): shards that do not answer start down and are probed again by backoff. Fails
  // only on a bad config, never on an unreachable Redis.
  static Result<std::unique_ptr<RedisTier>> create(RedisTierConfig config, const Clock* clock);
  // Sends the puts still queued (bounded by two calls' timeouts), drops other jobs, joins.
  ~RedisTier() override;

  std::string_view name() const override { return "remote"; }  // the `tier` label (--kv-remote)
  std::string_view medium() const override { return "REDIS"; }
  std::string_view memory() const override { return "Redis"; }
  bool enabled() const override;                 // any thread
  std::string disabled_reason() const override;  // the driving thread

  kvcache::TierOpId lookup(std::span<const kvcache::BlockHash> chain) override;
  kvcache::TierOpId put(std::span<const kvcache::TierPut> blocks) override;
  kvcache::TierOpId get(std::span<const kvcache::TierGet> blocks) override;
  void erase(std::span<const kvcache::BlockHash> hashes) override;
  void poll(std::vector<kvcache::TierCompletion>& out) override;
  // The first successful probe's SET + GET of one record's bytes (the driving thread).
  kvcache::TransferSample take_transfer_sample() override { return std::exchange(probe_sample_, kvcache::TransferSample{}); }

  kvcache::TierStats stats() const override;
  // Redis evicts by its own maxmemory policy, silently: the tier never calls it (bottom tier).
  void set_eviction_callback(kvcache::TierEvictionCallback callback) override { eviction_callback_ = std::move(callback); }

  int completion_fd() const { return event_fd_; }
  RedisTierStats redis_stats() const;            // any thread (as stats())
  std::string key_of(kvcache::BlockHash hash) const;
  const RedisTierConfig& config() const { return config_; }

 private:
  enum class JobKind : uint8_t { kLookup, kPut, kGet, kErase, kProbe };
  struct PutItem {
    kvcache::BlockRecordMeta meta;
    int shard = 0;
    bool skipped = false;         // its shard was down at submit: a failed item
    std::vector<uint8_t> bytes;   // [block_size x 4 token bytes | payload_bytes] (recycled)
  };
  struct Job {
    JobKind kind = JobKind::kLookup;
    kvcache::TierOpId id = 0;
    int64_t submit_ns = 0;
    int64_t num_items = 0;        // as submitted (lookup/get may be cut at a down shard)
    int probe_shard = -1;
    std::vector<kvcache::BlockHash> hashes;  // lookup, erase
    std::vector<kvcache::TierGet> gets;      // spans are the caller's until polled
    std::vector<PutItem> puts;
    int64_t put_bytes = 0;        // counted against max_inflight_put_bytes
  };
  struct Done {
    kvcache::TierCompletion completion;      // op jobs
    bool is_op = true;
    int probe_shard = -1;                    // probe jobs
    Status probe_status;
    int64_t probe_bytes = 0;                 // bytes its SET + GET moved (one record's, twice)
    int64_t probe_submit_ns = 0;             // when the probe was submitted (the driving thread's clock)
    std::vector<std::pair<int, std::string>> faults;  // shards the job found down
  };
  enum class Health : uint8_t { kUp, kDown, kProbing };
  struct ShardHealth {
    Health state = Health::kUp;
    std::string reason;
    int64_t backoff_ns = 0;
    int64_t next_probe_ns = 0;
  };
  struct Counters {  // both threads: atomics
    std::atomic<int64_t> lookups{0}, lookup_hit_blocks{0};
    std::atomic<int64_t> puts{0}, put_blocks{0}, put_failures{0};
    std::atomic<int64_t> gets{0}, get_blocks{0}, get_failures{0};
    std::atomic<int64_t> bytes_written{0}, bytes_read{0}, corrupt_records{0};
    std::atomic<int64_t> missing_records{0}, put_skipped_existing{0}, put_rejected_full{0}, put_rejected_backpressure{0};
    std::atomic<int64_t> items_while_down{0}, probes{0}, probe_failures{0}, recoveries{0};
    std::atomic<int64_t> raw_bytes_written{0}, raw_bytes_read{0}, compress_ns{0}, decompress_ns{0}, io_ns{0};
    // Copied from the I/O thread's RedisShards after every job.
    std::atomic<int64_t> connects{0}, faults{0}, timeouts{0}, moved{0}, ask{0}, refreshes{0};
    std::atomic<int> shards_up{0};  // published by the driving thread for enabled() from anywhere
  };

  RedisTier(RedisTierConfig config, const Clock* clock);
  kvcache::TierOpId submit(Job job);
  kvcache::TierOpId finish_now(kvcache::TierOpKind kind, int64_t num_items, Status status);
  int64_t up_prefix(std::span<const kvcache::BlockHash> hashes) const;
  void schedule_probes();
  void apply(Done& done);
  void publish_health();
  void io_main();
  // I/O thread: redis_tier_io.cpp
  Done run_job(Job& job);
  void run_lookup(Job& job, Done& done);
  void run_put(Job& job, Done& done);
  void run_get(Job& job, Done& done);
  void run_erase(Job& job);
  void run_probe(Job& job, Done& done);
  void recycle(std::vector<PutItem>& puts);

  RedisTierConfig config_;
  const Clock* clock_;
  std::string key_prefix_;                 // "pagoda@<fp>@<format>@"
  int64_t record_bytes_ = 0;               // every record of this pool
  kvcache::TransferSample probe_sample_;   // the first probe's timing, until taken
  bool probe_sampled_ = false;
  kvcache::TierEvictionCallback eviction_callback_;
  std::unique_ptr<Counters> counters_;

  // Driving thread.
  kvcache::TierOpId next_op_ = 1;
  std::vector<ShardHealth> health_;        // [num_shards]
  std::vector<kvcache::TierCompletion> ready_;  // finished during submit
  std::vector<Done> polled_;               // swap buffer for poll()

  // Shared (mu_).
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Job> jobs_;
  std::vector<Done> done_;
  std::vector<std::vector<uint8_t>> free_put_buffers_;  // recycled PutItem::bytes
  bool stop_ = false;
  std::atomic<int64_t> inflight_put_bytes_{0};
  int event_fd_ = -1;                      // eventfd: readable while done_ is not empty

  // I/O thread.
  RedisShards shards_;
  RecordValueCodec codec_;
  std::vector<RecordScratch> window_values_;  // [window] values of one pipelined window
  RecordScratch record_scratch_;
  std::vector<std::string> keys_;
  std::vector<RedisRequest> requests_;
  std::vector<RedisResponse> responses_;
  std::thread io_thread_;
};

}  // namespace pagoda::store
