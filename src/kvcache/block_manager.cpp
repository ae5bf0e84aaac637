#include "kvcache/block_manager.h"

#include <algorithm>
#include <utility>

namespace pagoda::kvcache {

// ---- PrefixMatch ----

PrefixMatch& PrefixMatch::operator=(PrefixMatch&& other) noexcept {
  if (this != &other) {
    reset();
    manager_ = std::exchange(other.manager_, nullptr);
    blocks_ = std::move(other.blocks_);
    other.blocks_.clear();
    ns_ = other.ns_;
    num_tokens_ = std::exchange(other.num_tokens_, 0);
  }
  return *this;
}

void PrefixMatch::reset() {
  if (manager_ != nullptr) {
    for (int32_t b : blocks_) manager_->unpin(b);
  }
  manager_ = nullptr;
  blocks_.clear();
  num_tokens_ = 0;
}

// ---- block bookkeeping: every state change of a block goes through these ----

BlockManager::BlockManager(BlockPool& pool, const BlockManagerOptions& options)
    : pool_(pool),
      hash_fn_(options.hash_fn),
      clock_(options.clock != nullptr ? options.clock : &own_clock_),
      index_(pool.num_blocks(), pool.layout().block_size),
      policy_(make_eviction_policy(options.eviction, pool.num_blocks())),
      usage_(static_cast<size_t>(pool.num_blocks())),
      pins_(static_cast<size_t>(pool.num_blocks()), 0) {
  CHECK(hash_fn_ != nullptr) << "no block hash function";
}

BlockManager::~BlockManager() {
  std::vector<SeqId> ids;
  for (const auto& entry : tables_) ids.push_back(entry.first);
  std::sort(ids.begin(), ids.end());
  for (SeqId id : ids) free_sequence(id);
  CHECK_EQ(num_pins_, 0) << "a PrefixMatch outlived its BlockManager";
}

void BlockManager::update_evictable(int32_t block) {
  const bool evictable = pool_.state(block) == BlockState::kCached && pins_[block] == 0 &&
                         index_.num_children(block) == 0;
  if (evictable && !policy_->contains(block)) {
    policy_->add(block, usage_[block]);
  } else if (!evictable && policy_->contains(block)) {
    policy_->remove(block);
  }
}

void BlockManager::evict_one() {
  const std::optional<int32_t> victim = policy_->victim();
  CHECK(victim.has_value()) << "no evictable block although " << num_available_blocks() << " are available";
  const int32_t block = *victim;
  policy_->remove(block);
  const int32_t parent = index_.parent(block);
  if (!listeners_.empty()) {
    BlockInfo info;
    info.block = block;
    info.hash = index_.hash(block);
    info.parent_hash = parent != PrefixIndex::kRoot ? index_.hash(parent) : kRootBlockHash;
    info.tokens = index_.tokens(block);
    info.ns = index_.ns(block);
    info.priority = usage_[block].priority;
    for (BlockEventListener* l : listeners_) l->on_block_evicted(info);
  }
  index_.erase(block);
  pool_.evict(block);
  usage_[block] = BlockUsage{};
  ++stats_.num_evictions;
  if (parent != PrefixIndex::kRoot) update_evictable(parent);  // may have become a leaf
}

int32_t BlockManager::allocate_block(int32_t priority) {
  if (pool_.num_free() == 0) evict_one();
  const std::optional<int32_t> block = pool_.allocate();
  CHECK(block.has_value()) << "no free block after eviction";
  usage_[*block] = BlockUsage{tick(), 1, priority};
  ++stats_.num_blocks_allocated;
  return *block;
}

void BlockManager::acquire(int32_t block, int32_t priority) {
  if (pool_.state(block) == BlockState::kCached) {
    if (pins_[block] > 0) --num_pinned_cached_;
    pool_.reuse(block);
    update_evictable(block);
  } else {
    pool_.ref(block);
  }
  BlockUsage& u = usage_[block];
  u.last_access = tick();
  ++u.num_accesses;
  u.priority = std::max(u.priority, priority);
}

void BlockManager::release(int32_t block, int32_t priority) {
  BlockUsage& u = usage_[block];
  u.last_access = tick();
  u.priority = std::max(u.priority, priority);
  switch (pool_.unref(block)) {
    case BlockState::kCached:
      if (pins_[block] > 0) ++num_pinned_cached_;
      update_evictable(block);
      break;
    case BlockState::kFree:
      u = BlockUsage{};
      break;
    case BlockState::kInUse:
      break;
  }
}

void BlockManager::pin(int32_t block) {
  CHECK(pool_.state(block) != BlockState::kFree) << "pin of free block " << block;
  ++num_pins_;
  if (pins_[block]++ == 0 && pool_.state(block) == BlockState::kCached) {
    ++num_pinned_cached_;
    update_evictable(block);
  }
}

void BlockManager::unpin(int32_t block) {
  CHECK_GT(pins_[block], 0) << "block " << block << " unpinned twice";
  --num_pins_;
  if (--pins_[block] == 0 && pool_.state(block) == BlockState::kCached) {
    --num_pinned_cached_;
    update_evictable(block);
  }
}

// ---- sequences ----

const BlockManager::Table& BlockManager::table(SeqId seq) const {
  auto it = tables_.find(seq);
  CHECK(it != tables_.end()) << "unknown sequence " << seq;
  return it->second;
}

BlockManager::Table& BlockManager::table(SeqId seq) {
  auto it = tables_.find(seq);
  CHECK(it != tables_.end()) << "unknown sequence " << seq;
  return it->second;
}

SeqId BlockManager::add_sequence(int64_t max_tokens, const SequenceOptions& options) {
  CHECK_GE(max_tokens, 0);
  const SeqId id = next_seq_id_++;
  Table& t = tables_[id];
  const int64_t bs = pool_.layout().block_size;
  t.blocks.reserve(static_cast<size_t>((max_tokens + bs - 1) / bs));
  t.tokens.reserve(static_cast<size_t>(max_tokens));
  t.block_hashes.reserve(static_cast<size_t>(max_tokens / bs));
  t.ns = options.ns;
  t.ns_key = options.ns.key();
  t.priority = options.priority;
  t.cacheable = options.cacheable && !options.select.on();
  if (options.select.on()) {
    t.select = std::make_unique<KvSelectState>();
    t.select->params = options.select;
    t.select->prompt = options.select_prompt;
    t.select->evicting = options.select.method == KvSelectMethod::kH2O;
    t.select->positions.reserve(static_cast<size_t>(max_tokens));
    t.select->scores.reserve(static_cast<size_t>(max_tokens));
  }
  return id;
}

void BlockManager::free_sequence(SeqId seq) {
  auto it = tables_.find(seq);
  CHECK(it != tables_.end()) << "unknown sequence " << seq;
  const Table& t = it->second;
  for (auto b = t.blocks.rbegin(); b != t.blocks.rend(); ++b) {
    if (*b >= 0) release(*b, t.priority);
  }
  tables_.erase(it);
}

SeqId BlockManager::fork(SeqId seq) {
  const Table& src = table(seq);
  CHECK(src.cacheable) << "fork of sequence " << seq << ", which is not cacheable (windowed)";
  CHECK(!src.loading) << "fork of sequence " << seq << " while its blocks load";
  const SeqId id = next_seq_id_++;
  Table& t = tables_[id];  // unordered_map: `src` stays valid
  t.blocks.reserve(src.blocks.capacity());
  t.tokens.reserve(src.tokens.capacity());
  t.block_hashes.reserve(src.block_hashes.capacity());
  t.blocks = src.blocks;
  t.tokens = src.tokens;
  t.block_hashes = src.block_hashes;
  t.length = src.length;
  t.num_computed = src.num_computed;
  t.ns = src.ns;
  t.ns_key = src.ns_key;
  t.priority = src.priority;
  t.tokens_known = src.tokens_known;
  for (int32_t b : t.blocks) acquire(b, t.priority);
  return id;
}

void BlockManager::truncate(SeqId seq, int64_t new_length) {
  Table& t = table(seq);
  CHECK(!t.loading) << "truncate of sequence " << seq << " while its blocks load";
  CHECK(new_length >= 0 && new_length <= t.length) << "truncate to " << new_length << " of " << t.length;
  CHECK(t.select == nullptr) << "truncate of selecting sequence " << seq << " (compact drops its rows)";
  const int64_t bs = pool_.layout().block_size;
  const size_t keep = static_cast<size_t>((new_length + bs - 1) / bs);
  while (t.blocks.size() > keep) {
    if (t.blocks.back() >= 0) release(t.blocks.back(), t.priority);
    t.blocks.pop_back();
  }
  t.length = new_length;
  t.num_computed = std::min(t.num_computed, new_length);
  if (t.tokens_known) t.tokens.resize(static_cast<size_t>(new_length));

  // A block cut into stays registered (and immutable): the next append copies it.
  t.block_hashes.resize(std::min(t.block_hashes.size(), static_cast<size_t>(new_length / bs)));
}

// ---- plan and apply ----

bool BlockManager::needs_copy(const Table& t, int64_t n_new) const {
  const int64_t bs = pool_.layout().block_size;
  if (n_new == 0 || t.length % bs == 0) return false;
  const int32_t last = t.blocks.back();
  return pool_.ref_count(last) > 1 || index_.contains(last);
}

KvPlan BlockManager::plan_table(const Table& t, int64_t n_new, bool after_eviction) const {
  CHECK_GE(n_new, 0);
  const int64_t bs = pool_.layout().block_size;
  KvPlan p;
  int64_t length = t.length;  // after the eviction an evicting selecting sequence does first
  // (SnapKV evicts from the step after its prompt on: its selection runs first.)
  const bool evicts = t.select != nullptr && (t.select->evicting || (t.select->params.method == KvSelectMethod::kSnapKv &&
                                                                      t.select->next_position >= t.select->prompt));
  if (after_eviction && evicts && length + n_new > t.select->params.budget) {
    length = std::max<int64_t>(0, t.select->params.budget - n_new);
  }
  p.num_new_blocks = std::max<int64_t>(0, (length + n_new + bs - 1) / bs - static_cast<int64_t>(t.blocks.size()));
  if (needs_copy(t, n_new)) {
    p.num_copies = 1;
    ++p.num_new_blocks;
  }
  p.num_available = num_available_blocks();
  return p;
}

KvPlan BlockManager::plan(SeqId seq, int64_t n_new) const { return plan_table(table(seq), n_new, true); }

KvPlan BlockManager::plan(const PrefixMatch& match, int64_t n_prompt) const {
  CHECK(match.manager_ == this || match.empty()) << "PrefixMatch from another BlockManager";
  CHECK(match.empty() || n_prompt > match.num_tokens()) << "the last prompt token is always computed";
  const int64_t bs = pool_.layout().block_size;
  KvPlan p;
  p.num_cached_tokens = match.num_tokens();
  p.num_new_blocks = (n_prompt + bs - 1) / bs - match.num_blocks();
  p.num_available = num_available_blocks();  // pinned matched blocks are not counted in it
  return p;
}

KvPlan BlockManager::plan(std::span<const int32_t> prompt, const KvNamespace& ns) const {
  const int64_t bs = pool_.layout().block_size;
  const int64_t n = static_cast<int64_t>(prompt.size());
  std::vector<int32_t> chain;
  const int64_t matched = n > 0 ? index_.match(prompt, ns, (n - 1) / bs, hash_fn_, chain) : 0;
  KvPlan p;
  p.num_cached_tokens = matched * bs;
  p.num_new_blocks = (n + bs - 1) / bs - matched;
  p.num_available = num_available_blocks();
  for (int32_t b : chain) {  // adopting them takes them out of the reclaimable ones
    if (pool_.state(b) == BlockState::kCached && pins_[b] == 0) --p.num_available;
  }
  return p;
}

bool BlockManager::append(SeqId seq, std::span<const int32_t> tokens, std::span<int64_t> slots_out,
                          std::vector<BlockCopy>& copies_out) {
  return append_tokens(table(seq), static_cast<int64_t>(tokens.size()), tokens.data(), slots_out, &copies_out);
}

bool BlockManager::append(SeqId seq, int64_t n_new, std::span<int64_t> slots_out) {
  return append_tokens(table(seq), n_new, nullptr, slots_out, nullptr);
}

bool BlockManager::append_tokens(Table& t, int64_t n_new, const int32_t* tokens, std::span<int64_t> slots_out,
                                 std::vector<BlockCopy>* copies_out) {
  CHECK_GE(n_new, 0);
  CHECK(!t.loading) << "append to a sequence whose blocks load";
  CHECK_GE(static_cast<int64_t>(slots_out.size()), n_new);
  const KvPlan p = plan_table(t, n_new, false);
  if (!p.fits()) return false;
  int32_t copy_src = -1;
  if (p.num_copies > 0) {
    copy_src = t.blocks.back();
    const int32_t dst = allocate_block(t.priority);
    t.blocks.back() = dst;
    if (copies_out != nullptr) {
      copies_out->push_back(BlockCopy{copy_src, dst});
    } else {
      pool_.copy_block(copy_src, dst);
    }
    ++stats_.num_cow_copies;
  }
  for (int64_t i = p.num_copies; i < p.num_new_blocks; ++i) t.blocks.push_back(allocate_block(t.priority));
  // Released only after this append's allocations, so none of them can evict it before the
  // caller has copied it.
  if (copy_src >= 0) release(copy_src, t.priority);
  if (tokens != nullptr && t.tokens_known) {
    t.tokens.insert(t.tokens.end(), tokens, tokens + n_new);
  } else if (n_new > 0) {
    t.tokens_known = false;
    t.tokens.clear();
  }
  const int64_t bs = pool_.layout().block_size;
  for (int64_t i = 0; i < n_new; ++i) {
    const int64_t pos = t.length + i;
    slots_out[i] = static_cast<int64_t>(t.blocks[pos / bs]) * bs + pos % bs;
  }
  t.length += n_new;
  if (t.select != nullptr) {
    for (int64_t i = 0; i < n_new; ++i) {
      t.select->positions.push_back(static_cast<int32_t>(t.select->next_position++));
      t.select->scores.push_back(t.select->new_row_score);
    }
  }
  return true;
}

void BlockManager::commit(SeqId seq) {
  Table& t = table(seq);
  CHECK(!t.loading) << "commit of sequence " << seq << " while its blocks load";
  t.num_computed = t.length;
  register_blocks(t);
}

void BlockManager::register_blocks(Table& t) {
  if (!t.tokens_known || !t.cacheable) return;
  const int64_t bs = pool_.layout().block_size;
  const std::span<const int32_t> all_tokens(t.tokens);
  stored_scratch_.clear();
  for (int64_t i = static_cast<int64_t>(t.block_hashes.size()); i < t.num_computed / bs; ++i) {
    const auto tokens = all_tokens.subspan(static_cast<size_t>(i * bs), static_cast<size_t>(bs));
    const BlockHash hash = hash_fn_(i > 0 ? t.block_hashes[i - 1] : kRootBlockHash, tokens, t.ns_key);
    const int32_t block = t.blocks[i];
    const int32_t parent = i > 0 ? t.blocks[i - 1] : PrefixIndex::kRoot;
    if (index_.contains(block)) {  // shared through fork or adopt: registered by another table
      const auto stored = index_.tokens(block);
      CHECK(index_.hash(block) == hash && index_.parent(block) == parent &&
            std::equal(stored.begin(), stored.end(), tokens.begin()))
          << "block " << block << " registered with other contents";
    } else {
      index_.insert(block, hash, parent, t.ns, tokens);
      pool_.set_cacheable(block);
      ++stats_.num_committed_blocks;
      if (!listeners_.empty()) {
        stored_scratch_.push_back(BlockInfo{block, hash, i > 0 ? t.block_hashes[i - 1] : kRootBlockHash, tokens, t.ns,
                                            usage_[block].priority});
      }
    }
    t.block_hashes.push_back(hash);
  }
  if (!stored_scratch_.empty()) {
    for (BlockEventListener* l : listeners_) l->on_blocks_stored(stored_scratch_);
  }
}

void BlockManager::add_listener(BlockEventListener* listener) {
  CHECK(listener != nullptr);
  CHECK(std::find(listeners_.begin(), listeners_.end(), listener) == listeners_.end()) << "listener added twice";
  listeners_.push_back(listener);
}

void BlockManager::remove_listener(BlockEventListener* listener) {
  auto it = std::find(listeners_.begin(), listeners_.end(), listener);
  CHECK(it != listeners_.end()) << "removing a listener that was not added";
  listeners_.erase(it);
}

// ---- prefix hits ----

PrefixMatch BlockManager::match_prefix(std::span<const int32_t> tokens, const KvNamespace& ns) {
  const int64_t bs = pool_.layout().block_size;
  const int64_t n = static_cast<int64_t>(tokens.size());
  PrefixMatch match;
  match.manager_ = this;
  match.ns_ = ns;
  const int64_t matched = n > 0 ? index_.match(tokens, ns, (n - 1) / bs, hash_fn_, match.blocks_) : 0;
  match.num_tokens_ = matched * bs;
  for (int32_t b : match.blocks_) pin(b);
  ++stats_.num_lookups;
  stats_.num_hit_tokens += match.num_tokens_;
  stats_.num_missed_tokens += n - match.num_tokens_;
  return match;
}

PrefixMatch BlockManager::pin_prefix(std::span<const int32_t> tokens, const KvNamespace& ns) {
  const int64_t bs = pool_.layout().block_size;
  PrefixMatch match;
  match.manager_ = this;
  match.ns_ = ns;
  match.num_tokens_ = index_.match(tokens, ns, static_cast<int64_t>(tokens.size()) / bs, hash_fn_, match.blocks_) * bs;
  for (int32_t b : match.blocks_) pin(b);
  return match;
}

void BlockManager::adopt(SeqId seq, PrefixMatch&& match) {
  Table& t = table(seq);
  CHECK(match.manager_ == this || match.empty()) << "PrefixMatch from another BlockManager";
  CHECK(t.length == 0 && t.blocks.empty()) << "adopt into sequence " << seq << " that holds tokens";
  CHECK(match.ns_ == t.ns || match.empty()) << "adopt of a match from another namespace into sequence " << seq;
  CHECK(t.cacheable || match.empty()) << "adopt into sequence " << seq << ", which is not cacheable";
  for (int32_t b : match.blocks_) {
    acquire(b, t.priority);
    t.blocks.push_back(b);
    const auto tokens = index_.tokens(b);
    if (t.tokens_known) t.tokens.insert(t.tokens.end(), tokens.begin(), tokens.end());
    t.block_hashes.push_back(index_.hash(b));
  }
  t.length = t.num_computed = match.num_tokens_;
  match.reset();
}

// ---- integrity ----

void BlockManager::check_integrity() const {
  pool_.check_integrity();
  index_.check_integrity();
  const int64_t bs = pool_.layout().block_size;
  const int32_t n = static_cast<int32_t>(pool_.num_blocks());
  std::vector<int32_t> holders(static_cast<size_t>(n), 0);
  for (const auto& [id, t] : tables_) {
    CHECK_EQ(static_cast<int64_t>(t.blocks.size()), (t.length + bs - 1) / bs) << "sequence " << id;
    CHECK(t.num_computed >= 0 && t.num_computed <= t.length) << "sequence " << id;
    CHECK(!t.tokens_known || static_cast<int64_t>(t.tokens.size()) == t.length) << "sequence " << id;
    CHECK_LE(static_cast<int64_t>(t.block_hashes.size()), t.num_computed / bs) << "sequence " << id;
    for (size_t i = 0; i < t.block_hashes.size(); ++i) {
      const int32_t b = t.blocks[i];
      CHECK(index_.contains(b) && index_.hash(b) == t.block_hashes[i]) << "sequence " << id << " block " << b;
      CHECK_EQ(index_.parent(b), i > 0 ? t.blocks[i - 1] : PrefixIndex::kRoot) << "sequence " << id;
      CHECK(index_.ns(b) == t.ns) << "sequence " << id << " holds block " << b << " of another namespace";
    }
    CHECK(t.cacheable || t.block_hashes.empty()) << "sequence " << id << " is not cacheable but registered";
    if (t.select != nullptr) check_select(id, t);
    if (t.loading) {  // blocks [num_computed / B, length / B): fresh, private, unregistered
      CHECK(t.cacheable && t.tokens_known && t.num_computed % bs == 0 && t.length % bs == 0 && t.length > t.num_computed)
          << "sequence " << id << " loading";
      CHECK_EQ(static_cast<int64_t>(t.block_hashes.size()), t.num_computed / bs) << "sequence " << id;
      for (int64_t j = t.num_computed / bs; j < t.length / bs; ++j) {
        const int32_t b = t.blocks[static_cast<size_t>(j)];
        CHECK(b >= 0 && pool_.state(b) == BlockState::kInUse && pool_.ref_count(b) == 1 && !index_.contains(b) &&
              pins_[b] == 0)
            << "sequence " << id << " loading block " << b;
      }
    }
    for (size_t i = 0; i < t.blocks.size(); ++i) {
      const int32_t b = t.blocks[i];
      if (b < 0) {
        CHECK(!t.cacheable && i + 1 < t.blocks.size()) << "sequence " << id << " has a hole at block " << i;
        continue;
      }
      ++holders[b];
    }
  }
  int64_t pins = 0, pinned_cached = 0;
  for (int32_t b = 0; b < n; ++b) {
    const BlockState state = pool_.state(b);
    CHECK_EQ(pool_.ref_count(b), holders[b]) << "block " << b;
    CHECK_EQ(index_.contains(b), pool_.cacheable(b)) << "block " << b;
    CHECK_GE(pins_[b], 0);
    pins += pins_[b];
    const int32_t parent = index_.contains(b) ? index_.parent(b) : PrefixIndex::kRoot;
    if (pins_[b] > 0) {
      CHECK(state != BlockState::kFree) << "pinned block " << b << " is free";
      CHECK(parent == PrefixIndex::kRoot || pins_[parent] > 0) << "pinned block " << b << " has an unpinned parent";
      if (state == BlockState::kCached) ++pinned_cached;
    }
    if (state == BlockState::kInUse && parent != PrefixIndex::kRoot) {
      CHECK(pool_.state(parent) == BlockState::kInUse) << "block " << b << " in use, its parent not";
    }
    const bool evictable = state == BlockState::kCached && pins_[b] == 0 && index_.num_children(b) == 0;
    CHECK_EQ(policy_->contains(b), evictable) << "eviction candidate set, block " << b;
  }
  CHECK_EQ(pins, num_pins_);
  CHECK_EQ(pinned_cached, num_pinned_cached_);
  CHECK_EQ(policy_->size() > 0, pool_.num_cached() > num_pinned_cached_) << "reclaimable blocks but no candidate";
}

}  // namespace pagoda::kvcache
