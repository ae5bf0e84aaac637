// KvCoordinator: blocks, pages, the LRU list, sequences (kv_coordinator_match.cpp: prefix hits,
// plans, check_integrity).
#include "kvcache/kv_coordinator.h"

#include <algorithm>

#include "core/check.h"

namespace pagoda::kvcache {

KvCoordinator::KvCoordinator(const KvCacheSpec& spec, const KvPageLayout& layout, int64_t num_pages,
                             BlockHashFn hash_fn)
    : spec_(spec), layout_(layout), hash_fn_(hash_fn), num_pages_(num_pages) {
  CHECK(spec_.validate().is_ok());
  CHECK_EQ(layout_.parts.size(), spec_.groups.size());
  CHECK_GE(num_pages, 0);
  CHECK_LE(num_pages, int64_t{1} << 30);
  const int64_t B = spec_.block_size;
  int64_t key = 0;
  for (size_t g = 0; g < spec_.groups.size(); ++g) {
    Group& group = groups_.emplace_back();
    group.parts = layout_.parts[g];
    const int64_t max_blocks = group.parts > 0 ? num_pages / group.parts : 0;
    group.blocks.assign(static_cast<size_t>(max_blocks), Block{});
    group.pages.assign(static_cast<size_t>(max_blocks * group.parts), -1);
    group.tokens.assign(static_cast<size_t>(max_blocks * B), 0);
    for (int64_t b = max_blocks - 1; b >= 0; --b) group.free_ids.push_back(static_cast<int32_t>(b));
    group.index.reserve(static_cast<size_t>(max_blocks));
    if (spec_.groups[g].layer.kind == KvGroupKind::kSliding) {
      group.window = spec_.groups[g].layer.window;
      group.window_blocks = (group.window - 1 + B - 1) / B;
    }
    key_base_.push_back(key);
    key += max_blocks;
  }
  CHECK_LE(key, int64_t{1} << 31);
  for (int64_t p = num_pages - 1; p >= 0; --p) free_pages_.push_back(static_cast<int32_t>(p));
}

KvCoordinator::~KvCoordinator() {
  CHECK_EQ(live_matches_, 0) << "a KvGroupMatch outlives its coordinator";
  std::vector<KvSeqId> ids;
  for (const auto& [id, s] : seqs_) ids.push_back(id);
  for (KvSeqId id : ids) free_sequence(id);
}

const KvCoordinator::Seq& KvCoordinator::get(KvSeqId seq) const {
  auto it = seqs_.find(seq);
  CHECK(it != seqs_.end()) << "unknown sequence " << seq;
  return it->second;
}
KvCoordinator::Seq& KvCoordinator::get(KvSeqId seq) {
  auto it = seqs_.find(seq);
  CHECK(it != seqs_.end()) << "unknown sequence " << seq;
  return it->second;
}

int32_t KvCoordinator::page(int64_t group, int32_t block, int64_t part) const {
  const Group& g = groups_[static_cast<size_t>(group)];
  CHECK(block >= 0 && g.blocks[static_cast<size_t>(block)].allocated && part >= 0 && part < g.parts);
  return g.pages[static_cast<size_t>(block * g.parts + part)];
}

int64_t KvCoordinator::slot(KvSeqId seq, int64_t group, int64_t part, int64_t pos) const {
  const Seq& s = get(seq);
  const int64_t B = spec_.block_size;
  CHECK(pos >= 0 && pos < s.length);
  const int32_t b = s.blocks[static_cast<size_t>(group)][static_cast<size_t>(pos / B)];
  CHECK_GE(b, 0) << "position " << pos << " is outside group " << group << "'s window";
  return page(group, b, part) * B + pos % B;
}

int64_t KvCoordinator::num_held_blocks(KvSeqId seq, int64_t group) const {
  const auto& t = get(seq).blocks[static_cast<size_t>(group)];
  return std::count_if(t.begin(), t.end(), [](int32_t b) { return b >= 0; });
}

int64_t KvCoordinator::num_cached_blocks(int64_t group) const {
  const auto& blocks = groups_[static_cast<size_t>(group)].blocks;
  return std::count_if(blocks.begin(), blocks.end(), [](const Block& b) { return b.allocated && b.ref == 0; });
}

int64_t KvCoordinator::num_in_use_blocks(int64_t group) const {
  const auto& blocks = groups_[static_cast<size_t>(group)].blocks;
  return std::count_if(blocks.begin(), blocks.end(), [](const Block& b) { return b.ref > 0; });
}

// ---- the LRU list of evictable blocks (keys: key_base_[g] + block) ----

void KvCoordinator::lru_push(size_t g, int32_t b) {
  Block& blk = groups_[g].blocks[static_cast<size_t>(b)];
  CHECK(!blk.in_lru);
  const int32_t key = lru_key(g, b);
  blk.in_lru = true;
  if (blk.window_released && lru_head_ >= 0) {
    const size_t hg = static_cast<size_t>(std::upper_bound(key_base_.begin(), key_base_.end(), lru_head_) - key_base_.begin() - 1);
    groups_[hg].blocks[static_cast<size_t>(lru_head_ - key_base_[hg])].lru_prev = key;
    blk.lru_prev = -1;
    blk.lru_next = lru_head_;
    lru_head_ = key;
    evictable_pages_ += groups_[g].parts;
    return;
  }
  blk.lru_prev = lru_tail_;
  blk.lru_next = -1;
  if (lru_tail_ >= 0) {
    const size_t tg = static_cast<size_t>(std::upper_bound(key_base_.begin(), key_base_.end(), lru_tail_) - key_base_.begin() - 1);
    groups_[tg].blocks[static_cast<size_t>(lru_tail_ - key_base_[tg])].lru_next = key;
  } else {
    lru_head_ = key;
  }
  lru_tail_ = key;
  evictable_pages_ += groups_[g].parts;
}

void KvCoordinator::lru_remove(size_t g, int32_t b) {
  Block& blk = groups_[g].blocks[static_cast<size_t>(b)];
  CHECK(blk.in_lru);
  auto block_of = [&](int32_t key) -> Block& {
    const size_t kg = static_cast<size_t>(std::upper_bound(key_base_.begin(), key_base_.end(), key) - key_base_.begin() - 1);
    return groups_[kg].blocks[static_cast<size_t>(key - key_base_[kg])];
  };
  if (blk.lru_prev >= 0) block_of(blk.lru_prev).lru_next = blk.lru_next; else lru_head_ = blk.lru_next;
  if (blk.lru_next >= 0) block_of(blk.lru_next).lru_prev = blk.lru_prev; else lru_tail_ = blk.lru_prev;
  blk.in_lru = false;
  blk.lru_prev = blk.lru_next = -1;
  evictable_pages_ -= groups_[g].parts;
}

void KvCoordinator::update_evictable(size_t g, int32_t b) {
  Block& blk = groups_[g].blocks[static_cast<size_t>(b)];
  const bool evictable = blk.allocated && blk.ref == 0 && blk.registered && blk.pins == 0;
  if (evictable && !blk.in_lru) lru_push(g, b);
  if (!evictable && blk.in_lru) lru_remove(g, b);
}

bool KvCoordinator::evict_front() {
  if (lru_head_ < 0) return false;
  const int32_t key = lru_head_;
  const size_t g = static_cast<size_t>(std::upper_bound(key_base_.begin(), key_base_.end(), key) - key_base_.begin() - 1);
  const int32_t b = static_cast<int32_t>(key - key_base_[g]);
  Group& group = groups_[g];
  Block& blk = group.blocks[static_cast<size_t>(b)];
  lru_remove(g, b);
  auto it = group.index.find(blk.hash);
  CHECK(it != group.index.end() && it->second == b);
  group.index.erase(it);
  blk.registered = false;
  blk.allocated = false;
  for (int64_t i = 0; i < group.parts; ++i) {
    free_pages_.push_back(group.pages[static_cast<size_t>(b * group.parts + i)]);
    group.pages[static_cast<size_t>(b * group.parts + i)] = -1;
  }
  group.free_ids.push_back(b);
  ++stats_.num_evictions;
  return true;
}

int64_t KvCoordinator::evict_all_cached() {
  int64_t n = 0;
  while (evict_front()) ++n;
  return n;
}

// ---- blocks ----

int32_t KvCoordinator::allocate(size_t g) {
  Group& group = groups_[g];
  while (static_cast<int64_t>(free_pages_.size()) < group.parts) CHECK(evict_front()) << "allocation without a plan that fits";
  CHECK(!group.free_ids.empty());
  const int32_t b = group.free_ids.back();
  group.free_ids.pop_back();
  for (int64_t i = 0; i < group.parts; ++i) {
    group.pages[static_cast<size_t>(b * group.parts + i)] = free_pages_.back();
    free_pages_.pop_back();
  }
  Block& blk = group.blocks[static_cast<size_t>(b)];
  blk = Block{};
  blk.allocated = true;
  blk.ref = 1;
  return b;
}

void KvCoordinator::acquire(size_t g, int32_t b) {
  Block& blk = groups_[g].blocks[static_cast<size_t>(b)];
  CHECK(blk.allocated);
  ++blk.ref;
  blk.window_released = false;
  update_evictable(g, b);
}

void KvCoordinator::release(size_t g, int32_t b) {
  Group& group = groups_[g];
  Block& blk = group.blocks[static_cast<size_t>(b)];
  CHECK(blk.allocated && blk.ref > 0);
  if (--blk.ref > 0) return;
  if (blk.registered) {
    update_evictable(g, b);
    return;
  }
  blk.allocated = false;
  for (int64_t i = 0; i < group.parts; ++i) {
    free_pages_.push_back(group.pages[static_cast<size_t>(b * group.parts + i)]);
    group.pages[static_cast<size_t>(b * group.parts + i)] = -1;
  }
  group.free_ids.push_back(b);
}

void KvCoordinator::pin(size_t g, int32_t b) {
  Block& blk = groups_[g].blocks[static_cast<size_t>(b)];
  CHECK(blk.allocated && blk.registered) << "only registered blocks are pinned";
  ++blk.pins;
  update_evictable(g, b);
}

void KvCoordinator::unpin(size_t g, int32_t b) {
  Block& blk = groups_[g].blocks[static_cast<size_t>(b)];
  CHECK(blk.allocated && blk.pins > 0);
  --blk.pins;
  update_evictable(g, b);
}

// ---- sequences ----

KvSeqId KvCoordinator::add_sequence(int64_t max_tokens, const KvNamespace& ns) {
  CHECK_GE(max_tokens, 0);
  const KvSeqId id = next_seq_++;
  Seq& s = seqs_[id];
  s.ns_key = ns.key();
  s.blocks.resize(groups_.size());
  const size_t max_blocks = static_cast<size_t>((max_tokens + spec_.block_size - 1) / spec_.block_size);
  for (size_t g = 0; g < groups_.size(); ++g) {
    if (groups_[g].parts > 0) s.blocks[g].reserve(max_blocks);
  }
  s.tokens.reserve(static_cast<size_t>(max_tokens));
  s.hashes.reserve(max_blocks);
  return id;
}

void KvCoordinator::free_sequence(KvSeqId seq) {
  Seq& s = get(seq);
  size_t longest = 0;
  for (const auto& t : s.blocks) longest = std::max(longest, t.size());
  for (size_t j = longest; j-- > 0;) {  // tail first, every group at each position
    for (size_t g = 0; g < groups_.size(); ++g) {
      if (j < s.blocks[g].size() && s.blocks[g][j] >= 0) release(g, s.blocks[g][j]);
    }
  }
  seqs_.erase(seq);
}

int64_t KvCoordinator::released_below(size_t g, int64_t num_computed) const {
  const Group& group = groups_[g];
  if (group.window_blocks < 0) return 0;
  const int64_t first_read = num_computed - group.window + 1;
  return first_read <= 0 ? 0 : first_read / spec_.block_size;
}

void KvCoordinator::release_window(Seq& s) {
  for (size_t g = 0; g < groups_.size(); ++g) {
    auto& t = s.blocks[g];
    const int64_t below = std::min<int64_t>(released_below(g, s.num_computed), static_cast<int64_t>(t.size()));
    for (int64_t j = below - 1; j >= 0 && t[static_cast<size_t>(j)] >= 0; --j) {
      groups_[g].blocks[static_cast<size_t>(t[static_cast<size_t>(j)])].window_released = true;
      release(g, t[static_cast<size_t>(j)]);
      t[static_cast<size_t>(j)] = -1;
      ++stats_.num_window_releases;
    }
  }
}

int64_t KvCoordinator::new_pages(const Seq& s, int64_t n_new, bool& cow) const {
  const int64_t B = spec_.block_size;
  int64_t pages = 0;
  cow = false;
  for (size_t g = 0; g < groups_.size(); ++g) {
    if (groups_[g].parts == 0) continue;
    const auto& t = s.blocks[g];
    int64_t blocks = (s.length + n_new + B - 1) / B - static_cast<int64_t>(t.size());
    if (n_new > 0 && s.length % B != 0) {
      const int32_t last = t.back();
      CHECK_GE(last, 0);
      if (groups_[g].blocks[static_cast<size_t>(last)].ref > 1) {
        ++blocks;
        cow = true;
      }
    }
    pages += blocks * groups_[g].parts;
  }
  return pages;
}

bool KvCoordinator::append(KvSeqId seq, std::span<const int32_t> tokens, std::vector<KvGroupCopy>& copies_out) {
  Seq& s = get(seq);
  release_window(s);
  const int64_t B = spec_.block_size;
  const int64_t n = static_cast<int64_t>(tokens.size());
  bool cow = false;
  if (new_pages(s, n, cow) > num_available_pages()) return false;
  for (size_t g = 0; g < groups_.size(); ++g) {
    if (groups_[g].parts == 0) continue;
    auto& t = s.blocks[g];
    if (n > 0 && s.length % B != 0 && groups_[g].blocks[static_cast<size_t>(t.back())].ref > 1) {
      const int32_t src = t.back();
      const int32_t dst = allocate(g);
      copies_out.push_back({static_cast<int32_t>(g), src, dst});
      release(g, src);
      t.back() = dst;
      ++stats_.num_cow_copies;
    }
    const int64_t need = (s.length + n + B - 1) / B;
    while (static_cast<int64_t>(t.size()) < need) t.push_back(allocate(g));
  }
  s.tokens.insert(s.tokens.end(), tokens.begin(), tokens.end());
  s.length += n;
  return true;
}

void KvCoordinator::commit(KvSeqId seq) {
  Seq& s = get(seq);
  const int64_t B = spec_.block_size;
  s.num_computed = s.length;
  for (int64_t j = static_cast<int64_t>(s.hashes.size()); j < s.num_computed / B; ++j) {
    const BlockHash parent = j == 0 ? kRootBlockHash : s.hashes[static_cast<size_t>(j - 1)];
    const std::span<const int32_t> block_tokens(s.tokens.data() + j * B, static_cast<size_t>(B));
    const BlockHash hash = hash_fn_(parent, block_tokens, s.ns_key);
    s.hashes.push_back(hash);
    for (size_t g = 0; g < groups_.size(); ++g) {
      if (groups_[g].parts == 0) continue;
      Group& group = groups_[g];
      const int32_t b = s.blocks[g][static_cast<size_t>(j)];
      CHECK_GE(b, 0);
      Block& blk = group.blocks[static_cast<size_t>(b)];
      if (blk.registered || group.index.count(hash)) continue;  // adopted, or computed twice: keep the first
      group.index.emplace(hash, b);
      blk.registered = true;
      blk.hash = hash;
      blk.parent = parent;
      blk.ns_key = s.ns_key;
      std::copy(block_tokens.begin(), block_tokens.end(), group.tokens.begin() + b * B);
    }
  }
  release_window(s);
}

KvSeqId KvCoordinator::fork(KvSeqId seq) {
  const Seq& parent = get(seq);
  CHECK_EQ(parent.num_computed, parent.length) << "fork of an uncommitted sequence";
  const KvSeqId id = next_seq_++;
  Seq& child = seqs_[id];
  child = get(seq);
  for (size_t g = 0; g < groups_.size(); ++g) {
    for (int32_t b : child.blocks[g]) {
      if (b >= 0) acquire(g, b);
    }
  }
  return id;
}

}  // namespace pagoda::kvcache
