// BlockManager: loading blocks from lower tiers (the protocol is at the top of block_manager.h).
#include <algorithm>

#include "kvcache/block_manager.h"

namespace pagoda::kvcache {

bool BlockManager::begin_load(SeqId seq, std::span<const int32_t> tokens) {
  Table& t = table(seq);
  const int64_t bs = pool_.layout().block_size;
  const int64_t n = static_cast<int64_t>(tokens.size());
  CHECK(t.cacheable && t.tokens_known && !t.loading) << "begin_load of sequence " << seq;
  CHECK(t.num_computed == t.length && t.length % bs == 0 && n % bs == 0 && n > 0)
      << "begin_load of " << n << " tokens at length " << t.length << " (computed " << t.num_computed << ")";
  CHECK_EQ(static_cast<int64_t>(t.block_hashes.size()), t.length / bs) << "sequence " << seq << " not committed";
  const KvPlan p = plan_table(t, n, false);
  if (!p.fits()) return false;
  for (int64_t i = 0; i < p.num_new_blocks; ++i) t.blocks.push_back(allocate_block(t.priority));
  t.tokens.insert(t.tokens.end(), tokens.begin(), tokens.end());
  t.length += n;
  t.loading = true;
  return true;
}

std::span<const int32_t> BlockManager::loading_blocks(SeqId seq) const {
  const Table& t = table(seq);
  if (!t.loading) return {};
  const int64_t bs = pool_.layout().block_size;
  return std::span<const int32_t>(t.blocks).subspan(static_cast<size_t>(t.num_computed / bs));
}

bool BlockManager::loadable(SeqId seq) const {
  const Table& t = table(seq);
  const int64_t bs = pool_.layout().block_size;
  return t.cacheable && t.tokens_known && !t.loading && t.num_computed == t.length && t.length % bs == 0 &&
         static_cast<int64_t>(t.block_hashes.size()) == t.length / bs;
}

BlockHash BlockManager::last_block_hash(SeqId seq) const {
  const Table& t = table(seq);
  return t.block_hashes.empty() ? kRootBlockHash : t.block_hashes.back();
}

void BlockManager::append_all_loading_blocks(std::vector<int32_t>& out) const {
  for (const auto& [seq, t] : tables_) {
    if (!t.loading) continue;
    const std::span<const int32_t> blocks = loading_blocks(seq);
    out.insert(out.end(), blocks.begin(), blocks.end());
  }
}

int64_t BlockManager::finish_load(SeqId seq, int64_t n_ok, std::span<const int32_t> record_tokens) {
  Table& t = table(seq);
  CHECK(t.loading) << "finish_load of sequence " << seq << ", which is not loading";
  const int64_t bs = pool_.layout().block_size;
  const int64_t first = t.num_computed / bs;
  const int64_t n_loading = t.length / bs - first;
  CHECK(n_ok >= 0 && n_ok <= n_loading) << n_ok << " of " << n_loading << " loading blocks";
  CHECK_GE(static_cast<int64_t>(record_tokens.size()), n_ok * bs);
  // A hash proposes, tokens decide: the records' token ids must be the prompt's.
  int64_t confirmed = 0;
  while (confirmed < n_ok) {
    const auto want = std::span<const int32_t>(t.tokens).subspan(static_cast<size_t>((first + confirmed) * bs),
                                                                  static_cast<size_t>(bs));
    const auto got = record_tokens.subspan(static_cast<size_t>(confirmed * bs), static_cast<size_t>(bs));
    if (!std::equal(want.begin(), want.end(), got.begin())) break;
    ++confirmed;
  }
  t.loading = false;
  const int64_t keep = (first + confirmed) * bs;
  truncate(seq, keep);          // the blocks not confirmed go back to the free list
  t.num_computed = keep;
  register_blocks(t);           // the confirmed ones become cached prefix blocks
  CHECK_EQ(static_cast<int64_t>(t.block_hashes.size()), first + confirmed);
  return confirmed;
}

int64_t BlockManager::evict_all_cached() {
  int64_t n = 0;
  while (policy_->size() > 0) {
    evict_one();
    ++n;
  }
  return n;
}

void BlockManager::committed_blocks(SeqId seq, std::vector<BlockInfo>& out) const {
  const Table& t = table(seq);
  out.clear();
  if (!t.tokens_known || !t.cacheable || t.loading) return;
  const int64_t bs = pool_.layout().block_size;
  const std::span<const int32_t> all_tokens(t.tokens);
  for (size_t i = 0; i < t.block_hashes.size(); ++i) {
    const int32_t block = t.blocks[i];
    out.push_back(BlockInfo{block, t.block_hashes[i], i > 0 ? t.block_hashes[i - 1] : kRootBlockHash,
                            all_tokens.subspan(i * static_cast<size_t>(bs), static_cast<size_t>(bs)), t.ns,
                            usage_[block].priority});
  }
}

}  // namespace pagoda::kvcache
