#include "store/cluster_slots.h"

#include <hiredis/hiredis.h>

#include <charconv>

namespace pagoda::store {
namespace {

constexpr std::array<uint16_t, 256> make_crc16_table() {
  std::array<uint16_t, 256> table{};
  for (int i = 0; i < 256; ++i) {
    uint16_t crc = static_cast<uint16_t>(i << 8);
    for (int b = 0; b < 8; ++b) crc = static_cast<uint16_t>((crc & 0x8000) ? (crc << 1) ^ 0x1021 : crc << 1);
    table[i] = crc;
  }
  return table;
}
constexpr std::array<uint16_t, 256> kCrc16Table = make_crc16_table();

bool parse_int(std::string_view text, int* out) {
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), *out);
  return !text.empty() && ec == std::errc() && end == text.data() + text.size();
}

}  // namespace

uint16_t crc16_xmodem(std::string_view bytes) {
  uint16_t crc = 0;
  for (unsigned char c : bytes) crc = static_cast<uint16_t>((crc << 8) ^ kCrc16Table[((crc >> 8) ^ c) & 0xff]);
  return crc;
}

int key_slot(std::string_view key) {
  const size_t open = key.find('{');
  if (open != std::string_view::npos) {
    const size_t close = key.find('}', open + 1);
    if (close != std::string_view::npos && close > open + 1) key = key.substr(open + 1, close - open - 1);
  }
  return crc16_xmodem(key) & (kClusterSlots - 1);
}

std::optional<Redirect> parse_redirect(std::string_view error) {
  Redirect r;
  if (error.starts_with("MOVED ")) {
    r.kind = Redirect::Kind::kMoved;
    error.remove_prefix(6);
  } else if (error.starts_with("ASK ")) {
    r.kind = Redirect::Kind::kAsk;
    error.remove_prefix(4);
  } else {
    return std::nullopt;
  }
  const size_t space = error.find(' ');
  if (space == std::string_view::npos || !parse_int(error.substr(0, space), &r.slot) || r.slot < 0 ||
      r.slot >= kClusterSlots) {
    return std::nullopt;
  }
  const std::string_view address = error.substr(space + 1);
  const size_t colon = address.rfind(':');
  if (colon == std::string_view::npos || colon == 0 || !parse_int(address.substr(colon + 1), &r.port) || r.port <= 0 ||
      r.port > 65535) {
    return std::nullopt;
  }
  r.host = std::string(address.substr(0, colon));
  if (r.host.size() > 2 && r.host.front() == '[' && r.host.back() == ']') r.host = r.host.substr(1, r.host.size() - 2);
  return r;
}

Result<std::vector<SlotRange>> parse_cluster_slots(const redisReply* reply, const std::string& seed_host) {
  if (reply == nullptr || reply->type != REDIS_REPLY_ARRAY) return Status::error("CLUSTER SLOTS: not an array");
  std::vector<SlotRange> ranges;
  for (size_t i = 0; i < reply->elements; ++i) {
    const redisReply* e = reply->element[i];
    if (e->type != REDIS_REPLY_ARRAY || e->elements < 3 || e->element[0]->type != REDIS_REPLY_INTEGER ||
        e->element[1]->type != REDIS_REPLY_INTEGER || e->element[2]->type != REDIS_REPLY_ARRAY ||
        e->element[2]->elements < 2) {
      return Status::error("CLUSTER SLOTS: malformed entry " + std::to_string(i));
    }
    const redisReply* master = e->element[2];
    if (master->element[0]->type != REDIS_REPLY_STRING || master->element[1]->type != REDIS_REPLY_INTEGER) {
      return Status::error("CLUSTER SLOTS: malformed master of entry " + std::to_string(i));
    }
    SlotRange r;
    r.first = static_cast<int>(e->element[0]->integer);
    r.last = static_cast<int>(e->element[1]->integer);
    if (r.first < 0 || r.last < r.first || r.last >= kClusterSlots) {
      return Status::error("CLUSTER SLOTS: slot range " + std::to_string(r.first) + "-" + std::to_string(r.last));
    }
    r.host.assign(master->element[0]->str, master->element[0]->len);
    if (r.host.empty() || r.host == "?") r.host = seed_host;
    r.port = static_cast<int>(master->element[1]->integer);
    if (r.port <= 0 || r.port > 65535) return Status::error("CLUSTER SLOTS: port " + std::to_string(r.port));
    ranges.push_back(std::move(r));
  }
  return ranges;
}

void SlotMap::assign(std::span<const SlotRange> ranges) {
  slot_node_.fill(-1);
  for (const SlotRange& r : ranges) {
    const int16_t node = static_cast<int16_t>(node_index(r.host, r.port));
    for (int s = r.first; s <= r.last; ++s) slot_node_[s] = node;
  }
  assigned_ = 0;
  for (int16_t n : slot_node_) assigned_ += n >= 0 ? 1 : 0;
}

void SlotMap::set(int slot, const std::string& host, int port) {
  CHECK(slot >= 0 && slot < kClusterSlots) << "slot " << slot;
  if (slot_node_[slot] < 0) ++assigned_;
  slot_node_[slot] = static_cast<int16_t>(node_index(host, port));
}

int SlotMap::node_index(const std::string& host, int port) {
  for (size_t i = 0; i < nodes_.size(); ++i) {
    if (nodes_[i].host == host && nodes_[i].port == port) return static_cast<int>(i);
  }
  CHECK_LT(nodes_.size(), size_t{32767}) << "too many cluster nodes";
  RedisEndpoint ep;
  ep.host = host;
  ep.port = port;
  nodes_.push_back(std::move(ep));
  return static_cast<int>(nodes_.size() - 1);
}

std::vector<std::pair<int, int>> SlotMap::masters() const {
  std::vector<int> first_slot(nodes_.size(), -1);
  for (int s = 0; s < kClusterSlots; ++s) {
    const int n = slot_node_[s];
    if (n >= 0 && first_slot[n] < 0) first_slot[n] = s;
  }
  std::vector<std::pair<int, int>> out;
  for (size_t n = 0; n < nodes_.size(); ++n) {
    if (first_slot[n] >= 0) out.emplace_back(static_cast<int>(n), first_slot[n]);
  }
  return out;
}

}  // namespace pagoda::store
