#include "events/block_index.h"

#include <cstdio>
#include <mutex>

#include <nlohmann/json.hpp>

#include "events/holder_index.h"

namespace pagoda::events {

using nlohmann::json;

namespace {

constexpr std::string_view kNoMedium = "GPU";  // an event without one is about the device pool

}  // namespace

std::string hash_to_hex(uint64_t h) {
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

bool hash_from_hex(std::string_view s, uint64_t& out) {
  if (s.empty() || s.size() > 16) return false;
  uint64_t v = 0;
  for (char c : s) {
    int d = -1;
    if (c >= '0' && c <= '9') d = c - '0';
    if (c >= 'a' && c <= 'f') d = c - 'a' + 10;
    if (c >= 'A' && c <= 'F') d = c - 'A' + 10;
    if (d < 0) return false;
    v = (v << 4) | static_cast<uint64_t>(d);
  }
  out = v;
  return true;
}

std::string snapshot_to_json(const KvEventsSnapshot& snapshot) {
  json media = json::object();
  for (const MediumBlocks& m : snapshot.media) {
    json hashes = json::array();
    for (uint64_t h : m.hashes) hashes.push_back(hash_to_hex(h));
    media[m.medium] = std::move(hashes);
  }
  return json{{"seq", snapshot.seq}, {"media", std::move(media)}}.dump();
}

Result<KvEventsSnapshot> snapshot_from_json(std::string_view text) {
  const json j = json::parse(text.begin(), text.end(), nullptr, false);
  if (j.is_discarded() || !j.is_object()) return Status::invalid_argument("KV events snapshot: not a JSON object");
  auto seq = j.find("seq");
  auto media = j.find("media");
  if (seq == j.end() || !seq->is_number_integer() || media == j.end() || !media->is_object()) {
    return Status::invalid_argument("KV events snapshot: needs \"seq\" (an integer) and \"media\" (an object)");
  }
  KvEventsSnapshot s;
  s.seq = seq->get<int64_t>();
  for (const auto& [name, hashes] : media->items()) {
    if (!hashes.is_array()) return Status::invalid_argument("KV events snapshot: media." + name + " must be an array");
    MediumBlocks m{name, {}};
    m.hashes.reserve(hashes.size());
    for (const json& h : hashes) {
      uint64_t v = 0;
      if (!h.is_string() || !hash_from_hex(h.get<std::string>(), v)) {
        return Status::invalid_argument("KV events snapshot: media." + name + " holds a hash that is not hex");
      }
      m.hashes.push_back(v);
    }
    s.media.push_back(std::move(m));
  }
  return s;
}

BlockIndex::Medium& BlockIndex::medium_locked(std::string_view name) {
  for (Medium& m : media_) {
    if (m.name == name) return m;
  }
  media_.push_back(Medium{std::string(name), {}});
  return media_.back();
}

bool BlockIndex::held_elsewhere_locked(const Medium& m, uint64_t hash) const {
  for (const Medium& other : media_) {
    if (&other != &m && other.hashes.count(hash) != 0) return true;
  }
  return false;
}

void BlockIndex::add_locked(Medium& m, uint64_t hash) {
  if (m.hashes.insert(hash).second && holders_ != nullptr && !held_elsewhere_locked(m, hash)) {
    holders_->add(hash, holder_);
  }
}

void BlockIndex::remove_locked(Medium& m, uint64_t hash) {
  if (m.hashes.erase(hash) != 0 && holders_ != nullptr && !held_elsewhere_locked(m, hash)) {
    holders_->remove(hash, holder_);
  }
}

void BlockIndex::clear_locked() {
  if (holders_ != nullptr) {
    for (const Medium& m : media_) {
      for (uint64_t h : m.hashes) holders_->remove(h, holder_);  // idempotent: once per medium is fine
    }
  }
  for (Medium& m : media_) m.hashes.clear();
}

void BlockIndex::apply_locked(const KvEvent& e) {
  switch (e.type) {
    case KvEventType::kBlockStored: {
      Medium& m = medium_locked(e.medium.value_or(std::string(kNoMedium)));
      for (uint64_t h : e.block_hashes) add_locked(m, h);
      return;
    }
    case KvEventType::kBlockRemoved: {
      Medium& m = medium_locked(e.medium.value_or(std::string(kNoMedium)));
      for (uint64_t h : e.block_hashes) remove_locked(m, h);
      return;
    }
    case KvEventType::kAllBlocksCleared:
      clear_locked();
      return;
  }
}

void BlockIndex::apply(const KvEventBatch& batch) {
  std::unique_lock lock(mutex_);
  for (const KvEvent& e : batch.events) apply_locked(e);
}

void BlockIndex::apply(const KvEvent& event) {
  std::unique_lock lock(mutex_);
  apply_locked(event);
}

void BlockIndex::insert(std::string_view medium, std::span<const uint64_t> hashes) {
  std::unique_lock lock(mutex_);
  Medium& m = medium_locked(medium);
  for (uint64_t h : hashes) add_locked(m, h);
}

void BlockIndex::erase(std::string_view medium, std::span<const uint64_t> hashes) {
  std::unique_lock lock(mutex_);
  Medium& m = medium_locked(medium);
  for (uint64_t h : hashes) remove_locked(m, h);
}

void BlockIndex::reset(const KvEventsSnapshot& snapshot) {
  std::unique_lock lock(mutex_);
  clear_locked();
  for (const MediumBlocks& mb : snapshot.media) {
    Medium& m = medium_locked(mb.medium);
    for (uint64_t h : mb.hashes) add_locked(m, h);
  }
}

void BlockIndex::clear() {
  std::unique_lock lock(mutex_);
  clear_locked();
}

int64_t BlockIndex::matched_blocks(std::span<const uint64_t> chain) const {
  std::shared_lock lock(mutex_);
  int64_t n = 0;
  for (uint64_t h : chain) {
    bool held = false;
    for (const Medium& m : media_) held = held || m.hashes.count(h) != 0;
    if (!held) break;
    ++n;
  }
  return n;
}

int64_t BlockIndex::num_blocks(std::string_view medium) const {
  std::shared_lock lock(mutex_);
  for (const Medium& m : media_) {
    if (m.name == medium) return static_cast<int64_t>(m.hashes.size());
  }
  return 0;
}

int64_t BlockIndex::num_blocks() const {
  std::shared_lock lock(mutex_);
  int64_t n = 0;
  for (const Medium& m : media_) n += static_cast<int64_t>(m.hashes.size());
  return n;
}

bool BlockIndex::contains(std::string_view medium, uint64_t hash) const {
  std::shared_lock lock(mutex_);
  for (const Medium& m : media_) {
    if (m.name == medium) return m.hashes.count(hash) != 0;
  }
  return false;
}

KvEventsSnapshot BlockIndex::snapshot(int64_t seq) const {
  std::shared_lock lock(mutex_);
  KvEventsSnapshot s;
  s.seq = seq;
  for (const Medium& m : media_) s.media.push_back(MediumBlocks{m.name, {m.hashes.begin(), m.hashes.end()}});
  return s;
}

}  // namespace pagoda::events
