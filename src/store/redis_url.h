// Where the remote KV pool lives, as the user writes it on the command line:
//
//   --kv-remote redis://HOST[:PORT][/DB]          one independent server (repeatable: several
//                                                 servers, blocks sharded by hash over them)
//   --kv-remote redis+cluster://HOST[:PORT]       a Redis Cluster; each URL is a seed node (the
//                                                 slot map comes from CLUSTER SLOTS)
//   redis://:PASSWORD@HOST:PORT                   AUTH before use (either form)
//
// PORT defaults to 6379; HOST may be an IPv4 address, a name, or [IPv6]. A list mixes no
// forms: either independent servers or the seeds of one cluster (DB only without a cluster).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace pagoda::store {

struct RedisEndpoint {
  std::string host;
  int port = 6379;
  std::string password;  // empty: no AUTH
  int db = 0;            // SELECT db (independent servers only)

  std::string address() const { return host + ":" + std::to_string(port); }  // "127.0.0.1:6379"
  bool operator==(const RedisEndpoint&) const = default;
};

struct RedisTopology {
  bool cluster = false;                  // true: `endpoints` are seeds of one Redis Cluster
  std::vector<RedisEndpoint> endpoints;  // independent servers (shards), or cluster seeds
};

Result<RedisEndpoint> parse_redis_url(std::string_view url, bool* is_cluster);
// All `--kv-remote` values of one command line. Fails on an empty list, on mixed forms, on
// duplicate servers.
Result<RedisTopology> parse_redis_urls(const std::vector<std::string>& urls);

// Compression of record values on the wire (--kv-remote-compress).
enum class RedisCompression : uint8_t { kNone = 0, kLz4 = 1, kZstd = 2 };
Result<RedisCompression> parse_redis_compression(std::string_view name);  // "none" | "lz4" | "zstd"
std::string_view redis_compression_name(RedisCompression compression);

}  // namespace pagoda::store
