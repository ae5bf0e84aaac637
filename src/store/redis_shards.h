// RedisShards: every connection of the Redis tier and the way a key finds its server. Used
// only on the tier's I/O thread.
//
// Shards. Independent servers (redis://, repeatable) are one shard each; a block goes to
// shard jump_hash(block hash, num servers) (Lamping & Veach), so adding a server moves only
// 1/n of the blocks. A Redis Cluster (redis+cluster://) is one shard over all its masters:
// keys are routed by slot (store/cluster_slots.h), MOVED updates the map (and a full
// CLUSTER SLOTS refresh follows before the next call), ASK is followed once with ASKING.
//
// Health, per shard:  up ──a fault (I/O error, timeout, refused, CLUSTERDOWN)──▶ down
//                     down ──probe(): fresh connections, a probe key's SET + GET return the
//                            same bytes on every server of the shard──▶ up
// While down, requests for the shard fail at once (no I/O). Error replies that are the
// server's answer (-OOM when full, -WRONGTYPE) are answers, not faults.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/status.h"
#include "store/cluster_slots.h"
#include "store/redis_connection.h"
#include "store/redis_url.h"

namespace pagoda::store {

struct RedisRequest {
  int shard = 0;
  std::string_view key;  // the command's key (routes it in a cluster)
  RedisArgv args;
};

struct RedisResponse {
  RedisReplyPtr reply;  // the server's answer (an error reply included); null when none came
  Status status;        // why no answer came (fault, shard down, too many redirects)
};

struct RedisShardStats {
  int64_t connects = 0;
  int64_t faults = 0;            // shards marked down
  int64_t timeouts = 0;          // faults that were timeouts
  int64_t moved_redirects = 0;
  int64_t ask_redirects = 0;
  int64_t slot_map_refreshes = 0;
};

int jump_hash(uint64_t key, int num_buckets);

class RedisShards {
 public:
  RedisShards(RedisTopology topology, RedisTimeouts timeouts, int max_redirects);

  int num_shards() const { return topology_.cluster ? 1 : static_cast<int>(topology_.endpoints.size()); }
  std::string shard_name(int shard) const;  // "127.0.0.1:6379", "cluster 127.0.0.1:7000"
  int shard_of(uint64_t block_hash) const { return jump_hash(block_hash, num_shards()); }
  bool down(int shard) const { return down_[shard] != 0; }

  // Sends every request, pipelined per server (all servers' pipelines in flight together), and
  // collects every answer. responses.size() == requests.size().
  void execute(std::span<const RedisRequest> requests, std::span<RedisResponse> responses);
  // Shards that went down in execute() since the last call, each with why.
  std::vector<std::pair<int, std::string>> take_faults();
  // Marks a shard down (e.g. a reply that says the cluster is down); its connections are
  // dropped at the end of the current execute() (or now, outside one).
  void mark_down(int shard, const std::string& why);

  // Fresh connections, then SET key `value` PX 60000, GET, compare, DEL on every server of the
  // shard. Ok: the shard is up. `nonce` keeps concurrent instances' probe keys apart.
  Status probe(int shard, std::string_view value, uint64_t nonce);

  const RedisShardStats& stats() const { return stats_; }

 private:
  struct Target;
  Result<RedisConnection*> connection(int shard, int node);
  Status refresh_slot_map();
  Status probe_server(RedisConnection& conn, const std::string& key, std::string_view value);
  void drop_connections(int shard);
  bool in_execute_ = false;

  RedisTopology topology_;
  RedisTimeouts timeouts_;
  int max_redirects_;
  // [servers] or [cluster nodes] (SlotMap index); null: not connected. Dropped only between
  // calls (execute() holds raw pointers to them).
  std::vector<std::unique_ptr<RedisConnection>> conns_;
  std::vector<char> down_;                             // [num_shards]
  SlotMap slot_map_;                                   // cluster only
  bool refresh_needed_ = true;                         // cluster: CLUSTER SLOTS before the next call
  std::vector<std::pair<int, std::string>> faults_;
  RedisShardStats stats_;
};

}  // namespace pagoda::store
