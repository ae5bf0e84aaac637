// BlockManager operations for windowed sequences (sliding-window models, StreamingLLM): a
// hole in the middle of a table, and dropping a block so that later positions move down.
// Rules: the top of kvcache/block_manager.h.
#include <algorithm>

#include "kvcache/block_manager.h"

namespace pagoda::kvcache {

void BlockManager::release_block(SeqId seq, int64_t j) {
  Table& t = table(seq);
  CHECK(!t.cacheable) << "release_block on cacheable sequence " << seq;
  CHECK(j >= 0 && j + 1 < static_cast<int64_t>(t.blocks.size())) << "release_block " << j << " of sequence " << seq;
  const int32_t b = t.blocks[j];
  CHECK_GE(b, 0) << "block " << j << " of sequence " << seq << " is already a hole";
  CHECK(pool_.ref_count(b) == 1 && !index_.contains(b)) << "block " << b << " is shared or registered";
  release(b, t.priority);
  t.blocks[j] = -1;
}

void BlockManager::drop_block(SeqId seq, int64_t j) {
  Table& t = table(seq);
  CHECK(!t.cacheable) << "drop_block on cacheable sequence " << seq;
  const int64_t bs = pool_.layout().block_size;
  CHECK(j >= 0 && j + 1 < static_cast<int64_t>(t.blocks.size())) << "drop_block " << j << " of sequence " << seq;
  CHECK_GE(t.num_computed, t.length) << "drop_block with uncomputed tokens";
  const int32_t b = t.blocks[j];
  if (b >= 0) {
    CHECK(pool_.ref_count(b) == 1 && !index_.contains(b)) << "block " << b << " is shared or registered";
    release(b, t.priority);
  }
  t.blocks.erase(t.blocks.begin() + j);
  if (t.tokens_known) t.tokens.erase(t.tokens.begin() + j * bs, t.tokens.begin() + (j + 1) * bs);
  t.length -= bs;
  t.num_computed -= bs;
}

int64_t BlockManager::num_held_blocks(SeqId seq) const {
  const Table& t = table(seq);
  return static_cast<int64_t>(t.blocks.size() - std::count(t.blocks.begin(), t.blocks.end(), -1));
}

}  // namespace pagoda::kvcache
