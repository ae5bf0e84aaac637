// KvCoordinator: prefix hits over every group (the rule at the top of kv_coordinator.h),
// plans, adoption and check_integrity.
#include <algorithm>

#include "core/check.h"
#include "kvcache/kv_coordinator.h"

namespace pagoda::kvcache {

KvGroupMatch& KvGroupMatch::operator=(KvGroupMatch&& other) noexcept {
  if (this == &other) return *this;
  reset();
  owner_ = other.owner_;
  blocks_ = std::move(other.blocks_);
  hashes_ = std::move(other.hashes_);
  tokens_ = std::move(other.tokens_);
  ns_key_ = other.ns_key_;
  num_tokens_ = other.num_tokens_;
  other.owner_ = nullptr;
  other.num_tokens_ = 0;
  other.blocks_.clear();
  return *this;
}

void KvGroupMatch::reset() {
  if (owner_ != nullptr) {
    for (size_t g = 0; g < blocks_.size(); ++g) {
      for (int32_t b : blocks_[g]) {
        if (b >= 0) owner_->unpin(g, b);
      }
    }
    --owner_->live_matches_;
  }
  owner_ = nullptr;
  blocks_.clear();
  hashes_.clear();
  tokens_.clear();
  num_tokens_ = 0;
}

int32_t KvCoordinator::lookup(size_t g, const std::vector<BlockHash>& hashes, std::span<const int32_t> tokens,
                              uint64_t ns_key, int64_t j) const {
  const Group& group = groups_[g];
  const BlockHash hash = hashes[static_cast<size_t>(j)];
  auto it = group.index.find(hash);
  if (it == group.index.end()) return -1;
  const Block& blk = group.blocks[static_cast<size_t>(it->second)];
  const BlockHash parent = j == 0 ? kRootBlockHash : hashes[static_cast<size_t>(j - 1)];
  if (blk.parent != parent || blk.ns_key != ns_key) return -1;
  const int64_t B = spec_.block_size;
  if (!std::equal(tokens.begin() + j * B, tokens.begin() + (j + 1) * B, group.tokens.begin() + it->second * B)) return -1;
  return it->second;
}

int64_t KvCoordinator::accept(size_t g, const std::vector<BlockHash>& hashes, std::span<const int32_t> tokens,
                              uint64_t ns_key, int64_t bound) const {
  const Group& group = groups_[g];
  if (group.window_blocks < 0) {  // every block of [0, L)
    int64_t j = 0;
    while (j < bound && lookup(g, hashes, tokens, ns_key, j) >= 0) ++j;
    return j;
  }
  const int64_t k = group.window_blocks;  // the last k blocks before L
  if (k == 0) return bound;
  int64_t run = 0;
  for (int64_t i = bound - 1; i >= 0; --i) {
    if (lookup(g, hashes, tokens, ns_key, i) < 0) {
      run = 0;
      continue;
    }
    if (++run == k) return i + k;
  }
  return run;  // blocks [0, run) are cached and run < k: a hit shorter than the window
}

KvGroupMatch KvCoordinator::match_prefix(std::span<const int32_t> tokens, const KvNamespace& ns) {
  const int64_t B = spec_.block_size;
  const int64_t n = static_cast<int64_t>(tokens.size());
  const int64_t max_blocks = n > 0 ? (n - 1) / B : 0;
  KvGroupMatch match;
  match.ns_key_ = ns.key();
  match.hashes_.reserve(static_cast<size_t>(max_blocks));
  for (int64_t j = 0; j < max_blocks; ++j) {
    const BlockHash parent = j == 0 ? kRootBlockHash : match.hashes_.back();
    match.hashes_.push_back(hash_fn_(parent, tokens.subspan(static_cast<size_t>(j * B), static_cast<size_t>(B)), match.ns_key_));
  }
  int64_t hit = max_blocks;
  for (bool lowered = true; lowered && hit > 0;) {
    lowered = false;
    for (size_t g = 0; g < groups_.size(); ++g) {
      if (groups_[g].parts == 0) continue;
      const int64_t a = accept(g, match.hashes_, tokens, match.ns_key_, hit);
      if (a < hit) {
        hit = a;
        lowered = true;
      }
    }
  }
  match.hashes_.resize(static_cast<size_t>(hit));
  match.tokens_.assign(tokens.begin(), tokens.begin() + hit * B);
  match.num_tokens_ = hit * B;
  match.blocks_.assign(groups_.size(), {});
  match.owner_ = this;
  ++live_matches_;
  for (size_t g = 0; g < groups_.size(); ++g) {
    if (groups_[g].parts == 0) continue;
    const int64_t first = groups_[g].window_blocks < 0 ? 0 : std::max<int64_t>(0, hit - groups_[g].window_blocks);
    auto& blocks = match.blocks_[g];
    blocks.assign(static_cast<size_t>(hit), -1);
    for (int64_t j = first; j < hit; ++j) {
      const int32_t b = lookup(g, match.hashes_, tokens, match.ns_key_, j);
      CHECK_GE(b, 0) << "an accepted block is gone";
      blocks[static_cast<size_t>(j)] = b;
      pin(g, b);
    }
  }
  ++stats_.num_lookups;
  stats_.num_hit_tokens += match.num_tokens_;
  stats_.num_missed_tokens += n - match.num_tokens_;
  return match;
}

KvGroupPlan KvCoordinator::plan(const KvGroupMatch& match, int64_t n_prompt) const {
  CHECK(match.owner_ == this || match.num_tokens_ == 0);
  CHECK_GE(n_prompt, match.num_tokens_);
  const int64_t B = spec_.block_size;
  KvGroupPlan p;
  p.num_cached_tokens = match.num_tokens_;
  for (size_t g = 0; g < groups_.size(); ++g) {
    p.num_new_pages += ((n_prompt + B - 1) / B - match.num_tokens_ / B) * groups_[g].parts;
  }
  p.num_available = num_available_pages();
  return p;
}

int64_t KvCoordinator::pages_released_by_window(const Seq& s, int64_t num_computed) const {
  int64_t pages = 0;
  for (size_t g = 0; g < groups_.size(); ++g) {
    const auto& t = s.blocks[g];
    const int64_t below = std::min<int64_t>(released_below(g, num_computed), static_cast<int64_t>(t.size()));
    for (int64_t j = below - 1; j >= 0 && t[static_cast<size_t>(j)] >= 0; --j) {
      const Block& blk = groups_[g].blocks[static_cast<size_t>(t[static_cast<size_t>(j)])];
      if (blk.ref == 1 && blk.pins == 0) pages += groups_[g].parts;
    }
  }
  return pages;
}

KvGroupPlan KvCoordinator::plan(KvSeqId seq, int64_t n_new) const {
  const Seq& s = get(seq);
  KvGroupPlan p;
  bool cow = false;
  p.num_new_pages = new_pages(s, n_new, cow);
  p.num_available = num_available_pages() + pages_released_by_window(s, s.num_computed);
  return p;
}

void KvCoordinator::adopt(KvSeqId seq, KvGroupMatch&& match) {
  Seq& s = get(seq);
  CHECK_EQ(s.length, 0) << "adopt into a sequence that holds tokens";
  CHECK(match.owner_ == this || match.num_tokens_ == 0);
  if (match.num_tokens_ == 0) {
    match.reset();
    return;
  }
  CHECK_EQ(match.ns_key_, s.ns_key) << "adopt across namespaces";
  for (size_t g = 0; g < groups_.size(); ++g) {
    for (int32_t b : match.blocks_[g]) {
      if (b < 0) continue;
      acquire(g, b);  // the table's reference, then the pin goes
      unpin(g, b);
    }
    s.blocks[g] = std::move(match.blocks_[g]);
  }
  s.tokens.assign(match.tokens_.begin(), match.tokens_.end());
  s.hashes.assign(match.hashes_.begin(), match.hashes_.end());
  s.length = s.num_computed = match.num_tokens_;
  --live_matches_;
  match.owner_ = nullptr;
  match.reset();
}

void KvCoordinator::check_integrity() const {
  const int64_t B = spec_.block_size;
  std::vector<int8_t> page_seen(static_cast<size_t>(num_pages_), 0);
  for (int32_t p : free_pages_) CHECK(p >= 0 && p < num_pages_ && page_seen[static_cast<size_t>(p)]++ == 0) << "page " << p;
  // Tables' references per block.
  std::vector<std::vector<int32_t>> refs(groups_.size());
  for (size_t g = 0; g < groups_.size(); ++g) refs[g].assign(groups_[g].blocks.size(), 0);
  for (const auto& [id, s] : seqs_) {
    CHECK_LE(s.num_computed, s.length);
    CHECK_EQ(static_cast<int64_t>(s.tokens.size()), s.length);
    CHECK_LE(static_cast<int64_t>(s.hashes.size()), s.num_computed / B);
    for (size_t g = 0; g < groups_.size(); ++g) {
      const auto& t = s.blocks[g];
      if (groups_[g].parts == 0) {
        CHECK(t.empty());
        continue;
      }
      CHECK_EQ(static_cast<int64_t>(t.size()), (s.length + B - 1) / B) << "sequence " << id << " group " << g;
      const int64_t holes = std::min<int64_t>(released_below(g, s.num_computed), static_cast<int64_t>(t.size()));
      for (int64_t j = 0; j < static_cast<int64_t>(t.size()); ++j) {
        const int32_t b = t[static_cast<size_t>(j)];
        CHECK_EQ(b < 0, j < holes) << "sequence " << id << " group " << g << " block " << j << ": hole iff out of window";
        if (b < 0) continue;
        ++refs[g][static_cast<size_t>(b)];
        const Block& blk = groups_[g].blocks[static_cast<size_t>(b)];
        if (blk.registered && j < static_cast<int64_t>(s.hashes.size())) CHECK_EQ(blk.hash, s.hashes[static_cast<size_t>(j)]);
      }
    }
  }
  int64_t lru_blocks = 0, lru_pages = 0;
  for (size_t g = 0; g < groups_.size(); ++g) {
    const Group& group = groups_[g];
    int64_t registered = 0;
    for (size_t b = 0; b < group.blocks.size(); ++b) {
      const Block& blk = group.blocks[b];
      CHECK_EQ(blk.ref, refs[g][b]) << "group " << g << " block " << b << " ref count";
      const bool in_free_ids = std::find(group.free_ids.begin(), group.free_ids.end(), static_cast<int32_t>(b)) != group.free_ids.end();
      CHECK_EQ(blk.allocated, !in_free_ids) << "group " << g << " block " << b;
      if (!blk.allocated) {
        CHECK(blk.ref == 0 && blk.pins == 0 && !blk.registered && !blk.in_lru);
        continue;
      }
      CHECK(blk.ref > 0 || blk.registered) << "an unregistered block nobody holds";
      for (int64_t i = 0; i < group.parts; ++i) {
        const int32_t p = group.pages[b * group.parts + i];
        CHECK(p >= 0 && p < num_pages_ && page_seen[static_cast<size_t>(p)]++ == 0) << "page " << p;
      }
      if (blk.registered) {
        ++registered;
        auto it = group.index.find(blk.hash);
        CHECK(it != group.index.end() && it->second == static_cast<int32_t>(b));
      }
      CHECK_EQ(blk.in_lru, blk.ref == 0 && blk.registered && blk.pins == 0);
      if (blk.in_lru) {
        ++lru_blocks;
        lru_pages += group.parts;
      }
    }
    CHECK_EQ(registered, static_cast<int64_t>(group.index.size()));
  }
  for (int8_t seen : page_seen) CHECK_EQ(seen, 1) << "a page is neither free nor in a block";
  CHECK_EQ(lru_pages, evictable_pages_);
  int64_t walked = 0;
  for (int32_t key = lru_head_, prev = -1; key >= 0; ++walked) {
    CHECK_LE(walked, lru_blocks);
    const size_t g = static_cast<size_t>(std::upper_bound(key_base_.begin(), key_base_.end(), key) - key_base_.begin() - 1);
    const Block& blk = groups_[g].blocks[static_cast<size_t>(key - key_base_[g])];
    CHECK(blk.in_lru && blk.lru_prev == prev);
    prev = key;
    key = blk.lru_next;
    if (key < 0) CHECK_EQ(prev, lru_tail_);
  }
  CHECK_EQ(walked, lru_blocks);
}

}  // namespace pagoda::kvcache
