// PrefixIndex: the radix tree of cached full blocks, one block per edge.
//
// Each registered block is a node: its chained hash (block_hash.h), its parent block (the
// block before it in the sequence that registered it; kRoot for a first block), its token ids
// and its namespace. The tree is stored by block id (parent link + child count) and found
// through an intrusive hash table: buckets of block ids chained through the blocks
// themselves, sized once for num_blocks nodes, so insert/erase never allocate.
//
// Several nodes may share a hash: a true collision (different tokens) or a duplicate (two
// sequences computed the same block independently). `match` confirms every node on the way
// down - hash, parent link, namespace and tokens - and follows every confirmed candidate, so
// it returns the longest confirmed chain. A collision costs a miss, never a wrong block.
//
// Contract: match never mutates. A node may be erased only when it is a leaf (no children),
// so every registered node's ancestors are registered: cached prefixes stay reachable.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "kvcache/block_hash.h"

namespace pagoda::kvcache {

class PrefixIndex {
 public:
  static constexpr int32_t kRoot = -1;  // parent of a sequence's first block

  PrefixIndex(int64_t num_blocks, int64_t block_size);

  int64_t block_size() const { return block_size_; }
  int64_t size() const { return num_nodes_; }  // registered blocks
  bool contains(int32_t block) const { return nodes_[block].registered; }

  // Registers `block` (not yet registered). Precondition: parent is kRoot or registered;
  // tokens.size() == block_size.
  void insert(int32_t block, BlockHash hash, int32_t parent, const KvNamespace& ns,
              std::span<const int32_t> tokens);
  // Unregisters a leaf. Precondition: contains(block) and num_children(block) == 0.
  void erase(int32_t block);

  BlockHash hash(int32_t block) const { return nodes_[block].hash; }
  int32_t parent(int32_t block) const { return nodes_[block].parent; }
  int32_t num_children(int32_t block) const { return nodes_[block].num_children; }
  const KvNamespace& ns(int32_t block) const { return nodes_[block].ns; }
  std::span<const int32_t> tokens(int32_t block) const {  // [block_size] token ids
    return {tokens_.data() + static_cast<size_t>(block) * block_size_, static_cast<size_t>(block_size_)};
  }

  // Longest confirmed chain for tokens[0, max_blocks * block_size): appends its block ids to
  // `chain_out` (root first) and returns how many. Hashes come from `hash_fn`.
  int64_t match(std::span<const int32_t> tokens, const KvNamespace& ns, int64_t max_blocks,
                BlockHashFn hash_fn, std::vector<int32_t>& chain_out) const;

  // Aborts unless child counts, parent links and bucket chains agree.
  void check_integrity() const;

 private:
  struct Node {
    BlockHash hash = 0;
    int32_t parent = kRoot;
    int32_t num_children = 0;
    int32_t next_in_bucket = -1;  // intrusive hash chain
    bool registered = false;
    KvNamespace ns;
  };
  size_t bucket_of(BlockHash hash) const { return static_cast<size_t>(hash & bucket_mask_); }
  bool confirms(int32_t block, BlockHash hash, const KvNamespace& ns, std::span<const int32_t> tokens) const;

  int64_t block_size_;
  int64_t num_nodes_ = 0;
  uint64_t bucket_mask_;
  std::vector<Node> nodes_;        // [num_blocks]
  std::vector<int32_t> tokens_;    // [num_blocks, block_size] token ids of registered blocks
  std::vector<int32_t> buckets_;   // [power of two >= num_blocks] first block id or -1
};

}  // namespace pagoda::kvcache
