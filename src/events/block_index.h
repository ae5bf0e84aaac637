// BlockIndex: the set of block hashes one instance holds, per medium, as its KV events say
// (BlockStored inserts, BlockRemoved erases, AllBlocksCleared empties every medium). The
// publisher keeps one as the exact mirror of what it announced (its snapshot answers a full
// resync); a router keeps one per worker and asks how much of a request's block chain each
// holds.
//
// KvEventsSnapshot: that state as of event batch `seq` (every batch <= seq reflected, none
// after), as the worker's /v1/kv/events/snapshot serves it (JSON: {"seq": S, "media":
// {"GPU": ["00ab...", ...], ...}}, hashes as 16 hex digits, since JSON numbers past 2^53 are
// lossy in many clients).
//
// Thread-safe: one writer (the event thread) and any number of readers.
#pragma once

#include <cstdint>
#include <shared_mutex>
#include <span>
#include <string>
#include <string_view>
#include <unordered_set>
#include <vector>

#include "core/status.h"
#include "events/kv_event.h"

namespace pagoda::events {

struct MediumBlocks {
  std::string medium;
  std::vector<uint64_t> hashes;
};

struct KvEventsSnapshot {
  int64_t seq = -1;                 // the last batch it reflects; -1: none was published yet
  std::vector<MediumBlocks> media;  // each medium once
};

// A 64-bit hash or namespace key as 16 lower-case hex digits (how JSON carries them), and back
// (1 to 16 hex digits, either case).
std::string hash_to_hex(uint64_t hash);
bool hash_from_hex(std::string_view text, uint64_t& hash);

std::string snapshot_to_json(const KvEventsSnapshot& snapshot);
Result<KvEventsSnapshot> snapshot_from_json(std::string_view text);

class HolderIndex;

class BlockIndex {
 public:
  BlockIndex() = default;
  // Also keeps `holders` (not owned; outlives this) told which hashes this instance, holder id
  // `holder`, holds in any medium: the router's inverted index (holder_index.h).
  BlockIndex(HolderIndex* holders, int32_t holder) : holders_(holders), holder_(holder) {}
  BlockIndex(const BlockIndex&) = delete;
  BlockIndex& operator=(const BlockIndex&) = delete;

  void apply(const KvEventBatch& batch);
  void apply(const KvEvent& event);
  // The same as a BlockStored / BlockRemoved event of `medium` would.
  void insert(std::string_view medium, std::span<const uint64_t> hashes);
  void erase(std::string_view medium, std::span<const uint64_t> hashes);
  // Replaces everything with the snapshot's blocks.
  void reset(const KvEventsSnapshot& snapshot);
  void clear();

  // How many hashes of `chain` (consecutive blocks, root first), from the first, it holds in
  // any medium.
  int64_t matched_blocks(std::span<const uint64_t> chain) const;
  int64_t num_blocks(std::string_view medium) const;
  int64_t num_blocks() const;  // over all media
  bool contains(std::string_view medium, uint64_t hash) const;
  KvEventsSnapshot snapshot(int64_t seq) const;

 private:
  struct Medium {
    std::string name;
    std::unordered_set<uint64_t> hashes;
  };
  Medium& medium_locked(std::string_view name);  // created on first use
  void apply_locked(const KvEvent& event);
  // Every change of a medium's set goes through these, which tell holders_ when the hash
  // enters or leaves the union of the media.
  void add_locked(Medium& m, uint64_t hash);
  void remove_locked(Medium& m, uint64_t hash);
  void clear_locked();
  bool held_elsewhere_locked(const Medium& m, uint64_t hash) const;

  HolderIndex* holders_ = nullptr;
  int32_t holder_ = -1;

  mutable std::shared_mutex mutex_;
  std::vector<Medium> media_;  // few: GPU, CPU, DISK, REDIS
};

}  // namespace pagoda::events
