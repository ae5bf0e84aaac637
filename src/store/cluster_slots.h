// Redis Cluster key routing (the cluster specification): a key lives in slot
// CRC16-XMODEM(key) mod 16384, where only the part inside the first non-empty "{...}" counts
// when there is one (a hash tag). Each slot is served by one master; the map comes from
// CLUSTER SLOTS and is corrected by the servers' redirects:
//   -MOVED <slot> <host>:<port>   the slot lives there now: update the map, resend there
//   -ASK <slot> <host>:<port>     this one key is being migrated: send ASKING + the command
//                                 there once, leave the map alone
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "store/redis_url.h"

struct redisReply;  // hiredis

namespace pagoda::store {

inline constexpr int kClusterSlots = 16384;

uint16_t crc16_xmodem(std::string_view bytes);
int key_slot(std::string_view key);

struct Redirect {
  enum class Kind : uint8_t { kMoved, kAsk };
  Kind kind = Kind::kMoved;
  int slot = 0;
  std::string host;
  int port = 0;
};
// Parses the text of an error reply; nullopt when it is no redirect.
std::optional<Redirect> parse_redirect(std::string_view error);

struct SlotRange {
  int first = 0, last = 0;  // inclusive
  std::string host;
  int port = 0;
};
// Parses a CLUSTER SLOTS reply: [[first, last, [host, port, id...], replicas...], ...]. An empty
// host (a node that does not know its address) is the seed's host `seed_host`.
Result<std::vector<SlotRange>> parse_cluster_slots(const redisReply* reply, const std::string& seed_host);

// Slot -> master. Node indices are stable for the map's life (new nodes are appended), so a
// connection table indexed by node survives a refresh.
class SlotMap {
 public:
  SlotMap() { slot_node_.fill(-1); }
  // Replaces every slot's master; slots the ranges leave out become unassigned.
  void assign(std::span<const SlotRange> ranges);
  void set(int slot, const std::string& host, int port);  // one slot moved (a MOVED redirect)
  int node_of(int slot) const { return slot_node_[slot]; }  // -1: unassigned
  int node_index(const std::string& host, int port);        // adds a node first seen
  const std::vector<RedisEndpoint>& nodes() const { return nodes_; }
  bool empty() const { return assigned_ == 0; }
  // Slots with a master, for "covers all 16384" checks.
  int num_assigned() const { return assigned_; }
  // The nodes that serve at least one slot, and one slot of each (for per-node probes).
  std::vector<std::pair<int, int>> masters() const;  // (node, a slot it serves)

 private:
  std::vector<RedisEndpoint> nodes_;
  std::array<int16_t, kClusterSlots> slot_node_{};  // [16384] node index or -1
  int assigned_ = 0;
};

}  // namespace pagoda::store
