// BlockManager: the block table of every sequence, over one BlockPool.
//
// A sequence holds blocks covering positions [0, length). Appending n tokens first *plans*
// (how many new blocks would it take: `blocks_needed`), then *applies* (`append`), which
// allocates them and writes one slot per new token:
//   slot(p) = block_table[p / block_size] * block_size + p % block_size.
// Running out of blocks is an ordinary answer (append returns false and changes nothing).
// Sequences release their blocks tail-first, so shared prefixes outlive suffixes.
// Invariant (check_integrity): each block's ref count == number of tables holding it.
#pragma once

#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

#include "kvcache/block_pool.h"

namespace pagoda::kvcache {

using SeqId = int64_t;

class BlockManager {
 public:
  explicit BlockManager(BlockPool& pool) : pool_(pool) {}
  BlockManager(const BlockManager&) = delete;
  BlockManager& operator=(const BlockManager&) = delete;
  ~BlockManager();

  // Registers an empty sequence; reserves its table for `max_tokens` so appends do not allocate.
  SeqId add_sequence(int64_t max_tokens);
  bool has_sequence(SeqId seq) const { return tables_.count(seq) != 0; }
  // Frees every block of the sequence (tail first) and forgets it.
  void free_sequence(SeqId seq);

  // Plan: new blocks needed to grow `seq` by n_new tokens.
  int64_t blocks_needed(SeqId seq, int64_t n_new) const;
  // Apply: grows seq by n_new tokens; slots_out[i] = slot of position length + i.
  // Returns false (and changes nothing) if the pool has too few free blocks.
  bool append(SeqId seq, int64_t n_new, std::span<int64_t> slots_out);
  // Drops tokens from the end (keeps the first new_length), freeing emptied blocks.
  void truncate(SeqId seq, int64_t new_length);

  int64_t length(SeqId seq) const { return table(seq).length; }
  const std::vector<int32_t>& block_table(SeqId seq) const { return table(seq).blocks; }
  int64_t num_sequences() const { return static_cast<int64_t>(tables_.size()); }
  BlockPool& pool() { return pool_; }

  void check_integrity() const;

 private:
  struct Table {
    std::vector<int32_t> blocks;  // [ceil(length / block_size)] block ids
    int64_t length = 0;           // tokens cached
  };
  const Table& table(SeqId seq) const;
  BlockPool& pool_;
  std::unordered_map<SeqId, Table> tables_;
  SeqId next_seq_id_ = 0;
};

}  // namespace pagoda::kvcache
