#include "kvcache/block_manager.h"

#include <map>

namespace pagoda::kvcache {

BlockManager::~BlockManager() {
  std::vector<SeqId> ids;
  for (const auto& entry : tables_) ids.push_back(entry.first);
  for (SeqId id : ids) free_sequence(id);
}

const BlockManager::Table& BlockManager::table(SeqId seq) const {
  auto it = tables_.find(seq);
  CHECK(it != tables_.end()) << "unknown sequence " << seq;
  return it->second;
}

SeqId BlockManager::add_sequence(int64_t max_tokens) {
  const SeqId id = next_seq_id_++;
  Table& t = tables_[id];
  const int64_t bs = pool_.layout().block_size;
  t.blocks.reserve(static_cast<size_t>((max_tokens + bs - 1) / bs));
  return id;
}

void BlockManager::free_sequence(SeqId seq) {
  auto it = tables_.find(seq);
  CHECK(it != tables_.end()) << "unknown sequence " << seq;
  auto& blocks = it->second.blocks;
  for (auto b = blocks.rbegin(); b != blocks.rend(); ++b) pool_.unref(*b);
  tables_.erase(it);
}

int64_t BlockManager::blocks_needed(SeqId seq, int64_t n_new) const {
  const Table& t = table(seq);
  const int64_t bs = pool_.layout().block_size;
  const int64_t have = static_cast<int64_t>(t.blocks.size());
  const int64_t need = (t.length + n_new + bs - 1) / bs;
  return std::max<int64_t>(0, need - have);
}

bool BlockManager::append(SeqId seq, int64_t n_new, std::span<int64_t> slots_out) {
  CHECK_GE(n_new, 0);
  CHECK_GE(static_cast<int64_t>(slots_out.size()), n_new);
  const int64_t needed = blocks_needed(seq, n_new);
  if (needed > pool_.num_free()) return false;
  Table& t = tables_.find(seq)->second;
  for (int64_t i = 0; i < needed; ++i) {
    auto block = pool_.allocate();
    CHECK(block.has_value());
    t.blocks.push_back(*block);
  }
  const int64_t bs = pool_.layout().block_size;
  for (int64_t i = 0; i < n_new; ++i) {
    const int64_t pos = t.length + i;
    slots_out[i] = static_cast<int64_t>(t.blocks[pos / bs]) * bs + pos % bs;
  }
  t.length += n_new;
  return true;
}

void BlockManager::truncate(SeqId seq, int64_t new_length) {
  auto it = tables_.find(seq);
  CHECK(it != tables_.end()) << "unknown sequence " << seq;
  Table& t = it->second;
  CHECK(new_length >= 0 && new_length <= t.length) << "truncate to " << new_length << " of " << t.length;
  const int64_t bs = pool_.layout().block_size;
  const size_t keep = static_cast<size_t>((new_length + bs - 1) / bs);
  while (t.blocks.size() > keep) {
    pool_.unref(t.blocks.back());
    t.blocks.pop_back();
  }
  t.length = new_length;
}

void BlockManager::check_integrity() const {
  pool_.check_integrity();
  std::map<int32_t, int32_t> holders;
  const int64_t bs = pool_.layout().block_size;
  for (const auto& [id, t] : tables_) {
    CHECK_EQ(static_cast<int64_t>(t.blocks.size()), (t.length + bs - 1) / bs) << "sequence " << id;
    for (int32_t b : t.blocks) ++holders[b];
  }
  int64_t in_use = 0;
  for (const auto& [block, count] : holders) {
    CHECK_EQ(pool_.ref_count(block), count) << "block " << block;
    ++in_use;
  }
  CHECK_EQ(in_use, pool_.num_in_use()) << "blocks in use but held by no table";
}

}  // namespace pagoda::kvcache
