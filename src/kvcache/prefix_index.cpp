#include "kvcache/prefix_index.h"

#include <algorithm>
#include <bit>

#include "core/check.h"

namespace pagoda::kvcache {

PrefixIndex::PrefixIndex(int64_t num_blocks, int64_t block_size)
    : block_size_(block_size),
      bucket_mask_(std::bit_ceil(static_cast<uint64_t>(std::max<int64_t>(num_blocks, 1))) - 1),
      nodes_(static_cast<size_t>(num_blocks)),
      tokens_(static_cast<size_t>(num_blocks * block_size), 0),
      buckets_(static_cast<size_t>(bucket_mask_ + 1), -1) {
  CHECK_GT(block_size, 0);
}

void PrefixIndex::insert(int32_t block, BlockHash hash, int32_t parent, const KvNamespace& ns,
                         std::span<const int32_t> tokens) {
  CHECK(block >= 0 && block < static_cast<int32_t>(nodes_.size())) << "block " << block;
  Node& node = nodes_[block];
  CHECK(!node.registered) << "block " << block << " registered twice";
  CHECK_EQ(static_cast<int64_t>(tokens.size()), block_size_);
  CHECK(parent == kRoot || nodes_[parent].registered) << "parent " << parent << " of block " << block << " not registered";
  node.hash = hash;
  node.parent = parent;
  node.num_children = 0;
  node.ns = ns;
  node.registered = true;
  std::copy(tokens.begin(), tokens.end(), tokens_.begin() + static_cast<ptrdiff_t>(block) * block_size_);
  int32_t& head = buckets_[bucket_of(hash)];
  node.next_in_bucket = head;
  head = block;
  if (parent != kRoot) ++nodes_[parent].num_children;
  ++num_nodes_;
}

void PrefixIndex::erase(int32_t block) {
  Node& node = nodes_[block];
  CHECK(node.registered) << "erase of unregistered block " << block;
  CHECK_EQ(node.num_children, 0) << "erase of inner block " << block;
  int32_t* link = &buckets_[bucket_of(node.hash)];
  while (*link != block) {
    CHECK_GE(*link, 0) << "block " << block << " missing from its bucket";
    link = &nodes_[*link].next_in_bucket;
  }
  *link = node.next_in_bucket;
  if (node.parent != kRoot) --nodes_[node.parent].num_children;
  node = Node{};
  --num_nodes_;
}

bool PrefixIndex::confirms(int32_t block, BlockHash hash, const KvNamespace& ns,
                           std::span<const int32_t> tokens) const {
  const Node& node = nodes_[block];
  if (node.hash != hash || !(node.ns == ns)) return false;
  const std::span<const int32_t> stored = this->tokens(block);
  return std::equal(stored.begin(), stored.end(), tokens.begin(), tokens.end());
}

int64_t PrefixIndex::match(std::span<const int32_t> tokens, const KvNamespace& ns, int64_t max_blocks,
                           BlockHashFn hash_fn, std::vector<int32_t>& chain_out) const {
  max_blocks = std::min<int64_t>(max_blocks, static_cast<int64_t>(tokens.size()) / block_size_);
  const uint64_t ns_key = ns.key();
  // Frontier: every confirmed node at the current depth (usually one; more only with duplicates).
  std::vector<int32_t> frontier{kRoot}, next;
  BlockHash hash = kRootBlockHash;
  int64_t depth = 0;
  for (; depth < max_blocks; ++depth) {
    const auto block_tokens = tokens.subspan(static_cast<size_t>(depth * block_size_), static_cast<size_t>(block_size_));
    hash = hash_fn(hash, block_tokens, ns_key);
    next.clear();
    for (int32_t b = buckets_[bucket_of(hash)]; b >= 0; b = nodes_[b].next_in_bucket) {
      if (std::find(frontier.begin(), frontier.end(), nodes_[b].parent) == frontier.end()) continue;
      if (confirms(b, hash, ns, block_tokens)) next.push_back(b);
    }
    if (next.empty()) break;
    frontier.swap(next);
  }
  const size_t first = chain_out.size();
  for (int32_t b = depth > 0 ? frontier.front() : kRoot; b != kRoot; b = nodes_[b].parent) chain_out.push_back(b);
  std::reverse(chain_out.begin() + static_cast<ptrdiff_t>(first), chain_out.end());
  return depth;
}

void PrefixIndex::check_integrity() const {
  const int32_t n = static_cast<int32_t>(nodes_.size());
  std::vector<int32_t> children(nodes_.size(), 0);
  std::vector<char> seen(nodes_.size(), 0);
  int64_t registered = 0;
  for (int32_t b = 0; b < n; ++b) {
    const Node& node = nodes_[b];
    if (!node.registered) continue;
    ++registered;
    if (node.parent != kRoot) {
      CHECK(node.parent >= 0 && node.parent < n && nodes_[node.parent].registered)
          << "block " << b << " has unregistered parent " << node.parent;
      CHECK(nodes_[node.parent].ns == node.ns) << "block " << b << " and its parent in different namespaces";
      ++children[node.parent];
    }
  }
  CHECK_EQ(registered, num_nodes_);
  int64_t chained = 0;
  for (size_t bucket = 0; bucket < buckets_.size(); ++bucket) {
    for (int32_t b = buckets_[bucket]; b >= 0; b = nodes_[b].next_in_bucket) {
      CHECK(b < n && nodes_[b].registered) << "bucket " << bucket << " holds unregistered block " << b;
      CHECK(!seen[b]) << "block " << b << " twice in the hash table";
      CHECK_EQ(bucket_of(nodes_[b].hash), bucket) << "block " << b << " in the wrong bucket";
      seen[b] = 1;
      ++chained;
    }
  }
  CHECK_EQ(chained, num_nodes_) << "registered blocks missing from the hash table";
  for (int32_t b = 0; b < n; ++b) {
    CHECK_EQ(children[b], nodes_[b].num_children) << "child count of block " << b;
  }
}

}  // namespace pagoda::kvcache
