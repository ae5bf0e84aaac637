// BlockManager operations for selecting sequences (kvcache/kv_select.h): compaction of the
// rows that survive an eviction. Rules: the top of kvcache/block_manager.h.
#include <algorithm>

#include "kvcache/block_manager.h"

namespace pagoda::kvcache {

int64_t BlockManager::next_position(SeqId seq) const {
  const Table& t = table(seq);
  return t.select != nullptr ? t.select->next_position : t.length;
}

void BlockManager::compact(SeqId seq, std::span<const int64_t> victims) {
  Table& t = table(seq);
  CHECK(t.select != nullptr) << "compact of sequence " << seq << ", which does not select";
  CHECK(!t.loading && t.num_computed == t.length) << "compact of sequence " << seq << " with uncomputed rows";
  if (victims.empty()) return;
  const int64_t bs = pool_.layout().block_size;
  const int64_t n_victims = static_cast<int64_t>(victims.size());
  const int64_t new_length = t.length - n_victims;
  for (size_t i = 0; i < victims.size(); ++i) {
    CHECK(victims[i] >= 0 && victims[i] < t.length && (i == 0 || victims[i] > victims[i - 1]))
        << "victims must be ascending rows of sequence " << seq;
  }
  for (int32_t b : t.blocks) CHECK(b >= 0 && pool_.ref_count(b) == 1) << "compact of a shared block " << b;
  KvSelectState& st = *t.select;
  // Holes below new_length are filled, in order, by the surviving rows at or above it.
  size_t v = 0;                        // next victim below new_length
  size_t tail_v = static_cast<size_t>(std::lower_bound(victims.begin(), victims.end(), new_length) - victims.begin());
  int64_t src = new_length;            // next candidate source row
  for (; v < victims.size() && victims[v] < new_length; ++v) {
    while (tail_v < victims.size() && victims[tail_v] == src) {  // a victim in the tail: skip it
      ++tail_v;
      ++src;
    }
    const int64_t dst = victims[v];
    const int32_t src_block = t.blocks[src / bs], dst_block = t.blocks[dst / bs];
    for (int64_t l = 0; l < pool_.layout().n_layer; ++l) {
      kernels::kv_copy_row(pool_.layer_view(l), src_block, src % bs, dst_block, dst % bs);
    }
    st.positions[dst] = st.positions[src];
    st.scores[dst] = st.scores[src];
    if (t.tokens_known) t.tokens[dst] = t.tokens[src];
    ++src;
  }
  const size_t keep = static_cast<size_t>((new_length + bs - 1) / bs);
  while (t.blocks.size() > keep) {
    release(t.blocks.back(), t.priority);
    t.blocks.pop_back();
  }
  t.length = t.num_computed = new_length;
  if (t.tokens_known) t.tokens.resize(static_cast<size_t>(new_length));
  st.positions.resize(static_cast<size_t>(new_length));
  st.scores.resize(static_cast<size_t>(new_length));
  st.num_evicted += n_victims;
}

void BlockManager::check_select(SeqId id, const Table& t) const {
  const KvSelectState& st = *t.select;
  CHECK(!t.cacheable) << "selecting sequence " << id << " is cacheable";
  CHECK_EQ(static_cast<int64_t>(st.positions.size()), t.length) << "sequence " << id;
  CHECK_EQ(static_cast<int64_t>(st.scores.size()), t.length) << "sequence " << id;
  CHECK_EQ(st.next_position, t.length + st.num_evicted) << "sequence " << id;
  std::vector<int32_t> sorted(st.positions);
  std::sort(sorted.begin(), sorted.end());
  for (size_t i = 0; i < sorted.size(); ++i) {
    CHECK(sorted[i] >= 0 && sorted[i] < st.next_position && (i == 0 || sorted[i] > sorted[i - 1]))
        << "sequence " << id << " stores position " << sorted[i] << " twice or out of range";
  }
}

}  // namespace pagoda::kvcache
