#include "kvcache/block_manager.h"

#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <string>

#include "core/rng.h"

namespace pagoda::kvcache {
namespace {

KvLayout small_layout(int64_t block_size) {
  KvLayout l;
  l.n_layer = 2;
  l.n_kv_head = 2;
  l.head_dim = 4;
  l.block_size = block_size;
  return l;
}

TEST(KvLayout, SizingArithmetic) {
  KvLayout l;
  l.n_layer = 32;
  l.n_kv_head = 8;
  l.head_dim = 128;
  l.dtype = kernels::KvDType::kF16;
  EXPECT_EQ(l.bytes_per_token(), 131072);  // Llama-3-8B in f16
  l.block_size = 16;
  EXPECT_EQ(l.bytes_per_block(), 131072 * 16);
  auto plan = plan_kv_pool(l, int64_t{1} << 30);
  ASSERT_TRUE(plan.is_ok());
  EXPECT_EQ(plan->num_blocks, 512);
  EXPECT_EQ(plan->token_capacity, 8192);
  EXPECT_FALSE(plan_kv_pool(l, 1000).is_ok());
  EXPECT_EQ(*parse_bytes("512M"), 512ll << 20);
  EXPECT_EQ(*parse_bytes("1.5GiB"), 3ll << 29);
  EXPECT_FALSE(parse_bytes("lots").is_ok());
  EXPECT_FALSE(parse_bytes("12XB").is_ok());
}

TEST(BlockManager, SlotsFollowTheBlockTable) {
  auto pool = BlockPool::create(small_layout(4), 8);
  ASSERT_TRUE(pool.is_ok());
  BlockManager m(*pool);
  SeqId a = m.add_sequence(32);
  std::vector<int64_t> slots(10);
  EXPECT_EQ(m.blocks_needed(a, 10), 3);
  ASSERT_TRUE(m.append(a, 10, slots));
  const auto& table = m.block_table(a);
  ASSERT_EQ(table.size(), 3u);
  for (int64_t p = 0; p < 10; ++p) EXPECT_EQ(slots[p], table[p / 4] * 4 + p % 4);
  EXPECT_EQ(m.blocks_needed(a, 2), 0);  // fits in the partly filled last block
  EXPECT_EQ(m.blocks_needed(a, 3), 1);
  SeqId b = m.add_sequence(32);
  std::vector<int64_t> big(21);
  EXPECT_FALSE(m.append(b, 21, big));  // needs 6, 5 free: nothing changes
  EXPECT_EQ(m.length(b), 0);
  EXPECT_EQ(pool->num_free(), 5);
  m.check_integrity();
  m.truncate(a, 5);
  EXPECT_EQ(m.block_table(a).size(), 2u);
  m.free_sequence(a);
  m.free_sequence(b);
  EXPECT_EQ(pool->num_free(), 8);
  m.check_integrity();
}

TEST(BlockManager, RandomOperationsKeepIntegrity) {
  Rng rng(2024);
  for (int64_t block_size : {1, 3, 16}) {
    auto pool = BlockPool::create(small_layout(block_size), 40);
    ASSERT_TRUE(pool.is_ok());
    BlockManager m(*pool);
    std::map<SeqId, int64_t> lengths;  // the expected state
    std::vector<int64_t> slots(64);
    for (int step = 0; step < 3000; ++step) {
      const uint64_t op = rng.next_u64() % 10;
      if (op < 2 || lengths.empty()) {
        lengths[m.add_sequence(256)] = 0;
      } else {
        auto it = lengths.begin();
        std::advance(it, rng.next_u64() % lengths.size());
        if (op < 7) {
          const int64_t n = static_cast<int64_t>(rng.next_u64() % 20);
          const int64_t need = (it->second + n + block_size - 1) / block_size - (it->second + block_size - 1) / block_size;
          const bool ok = m.append(it->first, n, slots);
          EXPECT_EQ(ok, need <= pool->num_free() + (ok ? need : 0));
          if (ok) it->second += n;
        } else if (op < 8) {
          const int64_t keep = it->second ? static_cast<int64_t>(rng.next_u64() % (it->second + 1)) : 0;
          m.truncate(it->first, keep);
          it->second = keep;
        } else {
          m.free_sequence(it->first);
          lengths.erase(it);
        }
      }
      int64_t blocks = 0;
      for (const auto& [id, len] : lengths) {
        ASSERT_EQ(m.length(id), len);
        blocks += (len + block_size - 1) / block_size;
      }
      ASSERT_EQ(pool->num_in_use(), blocks);
      m.check_integrity();
    }
  }
}

// ---- prefix caching, copy-on-write and eviction, scripted the way the engine drives them ----

BlockHash constant_hash(BlockHash, std::span<const int32_t>, uint64_t) { return 7; }
BlockHash hash_ignoring_namespace(BlockHash parent, std::span<const int32_t> tokens, uint64_t) {
  return hash_block(parent, tokens, 0);
}

struct Harness {
  Harness(int64_t block_size, int64_t num_blocks, const BlockManagerOptions& options = {})
      : pool(BlockPool::create(small_layout(block_size), num_blocks).value()), m(pool, options) {}

  // match -> adopt -> append the rest (copies applied) -> forward (nothing here) -> commit.
  SeqId run(const std::vector<int32_t>& prompt, const SequenceOptions& options = {}, bool commit = true) {
    PrefixMatch hit = m.match_prefix(prompt, options.ns);
    const SeqId s = m.add_sequence(64, options);
    const int64_t cached = hit.num_tokens();
    EXPECT_LT(cached, static_cast<int64_t>(prompt.size()));
    m.adopt(s, std::move(hit));
    EXPECT_EQ(m.length(s), cached);
    append(s, std::span<const int32_t>(prompt).subspan(cached));
    if (commit) m.commit(s);
    m.check_integrity();
    return s;
  }
  std::vector<BlockCopy> append(SeqId s, std::span<const int32_t> tokens) {
    std::vector<int64_t> slots(tokens.size());
    std::vector<BlockCopy> copies;
    EXPECT_TRUE(m.append(s, tokens, slots, copies));
    for (const BlockCopy& c : copies) pool.copy_block(c.src_block, c.dst_block);
    m.check_integrity();
    return copies;
  }
  std::vector<BlockCopy> append(SeqId s, std::vector<int32_t> tokens) {
    return append(s, std::span<const int32_t>(tokens));
  }
  void release(SeqId s) {
    m.free_sequence(s);
    m.check_integrity();
  }
  // Hit a prompt and give it back (one more use of its cached blocks).
  void touch(const std::vector<int32_t>& prompt, const SequenceOptions& options = {}) {
    PrefixMatch hit = m.match_prefix(prompt, options.ns);
    const SeqId s = m.add_sequence(64, options);
    m.adopt(s, std::move(hit));
    release(s);
  }
  int64_t cached_tokens(const std::vector<int32_t>& prompt, const KvNamespace& ns = {}) const {
    return m.plan(prompt, ns).num_cached_tokens;
  }

  BlockPool pool;
  BlockManager m;
};

TEST(PrefixCache, CommittedBlocksAreAdoptedByLaterPrompts) {
  Harness h(4, 16);
  const std::vector<int32_t> prompt = {10, 11, 12, 13, 14, 15, 16, 17, 18, 19};
  const SeqId a = h.run(prompt);
  EXPECT_EQ(h.m.index().size(), 2);  // two full blocks; the partial third is never cached
  EXPECT_EQ(h.m.stats().num_committed_blocks, 2);
  EXPECT_EQ(h.cached_tokens(prompt), 8);
  EXPECT_EQ(h.cached_tokens({10, 11, 12, 13, 14, 15, 16, 17}), 4);  // last token always computed
  EXPECT_EQ(h.cached_tokens({10, 11, 12, 13, 14, 15, 16, 17, 99}), 8);
  EXPECT_EQ(h.cached_tokens({10, 11, 12, 13, 99, 15, 16, 17, 18}), 4);
  EXPECT_EQ(h.cached_tokens({11, 11, 12, 13, 14}), 0);

  const KvPlan plan = h.m.plan(prompt, KvNamespace{});
  EXPECT_EQ(plan.num_new_blocks, 1);
  EXPECT_TRUE(plan.fits());
  const SeqId b = h.run(prompt);
  EXPECT_EQ(h.m.stats().num_lookups, 2);
  EXPECT_EQ(h.m.stats().num_hit_tokens, 8);
  EXPECT_EQ(h.m.stats().num_missed_tokens, 10 + 2);
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(h.m.block_table(a)[i], h.m.block_table(b)[i]);
    EXPECT_EQ(h.pool.ref_count(h.m.block_table(a)[i]), 2);
  }
  EXPECT_NE(h.m.block_table(a)[2], h.m.block_table(b)[2]);

  h.release(a);  // its partial block goes free, the shared ones stay in use
  EXPECT_EQ(h.pool.num_in_use(), 3);
  h.release(b);
  EXPECT_EQ(h.pool.num_cached(), 2);
  EXPECT_EQ(h.pool.num_free(), 14);
  EXPECT_EQ(h.m.num_available_blocks(), 16);
  EXPECT_EQ(h.m.plan(prompt, KvNamespace{}).num_available, 14);  // adopting takes the 2 cached
  const SeqId c = h.run(prompt);  // reuses the cached blocks
  EXPECT_EQ(h.pool.num_cached(), 0);
  EXPECT_EQ(h.pool.num_in_use(), 3);
  EXPECT_EQ(h.m.stats().num_hit_tokens, 16);
  h.release(c);
}

TEST(PrefixCache, UncommittedBlocksAreNeverMatched) {
  Harness h(4, 8);
  const std::vector<int32_t> prompt = {1, 2, 3, 4, 5, 6, 7, 8, 9};
  const SeqId a = h.run(prompt, {}, /*commit=*/false);
  EXPECT_EQ(h.cached_tokens(prompt), 0);
  EXPECT_EQ(h.m.num_computed(a), 0);
  h.m.commit(a);
  EXPECT_EQ(h.m.num_computed(a), 9);
  EXPECT_EQ(h.cached_tokens(prompt), 8);
  h.release(a);
  // A sequence appended without token ids (the compatibility overload) is never cached.
  const SeqId b = h.m.add_sequence(16);
  std::vector<int64_t> slots(9);
  ASSERT_TRUE(h.m.append(b, 9, slots));
  h.m.commit(b);
  EXPECT_EQ(h.m.index().size(), 2);  // only a's blocks
  h.release(b);
}

TEST(PrefixCache, HashCollisionsAreMisses) {
  BlockManagerOptions options;
  options.hash_fn = &constant_hash;  // every block of every prompt collides
  Harness h(2, 16, options);
  h.release(h.run({1, 2, 3, 4, 5}));
  EXPECT_EQ(h.cached_tokens({1, 2, 3, 4, 5}), 4);
  EXPECT_EQ(h.cached_tokens({1, 2, 4, 3, 5}), 2);
  EXPECT_EQ(h.cached_tokens({2, 1, 3, 4, 5}), 0);
  EXPECT_EQ(h.cached_tokens({3, 4, 1, 2, 5}), 0);  // right tokens under the wrong parent
  PrefixMatch miss = h.m.match_prefix(std::vector<int32_t>{2, 1, 3, 4, 5}, KvNamespace{});
  EXPECT_TRUE(miss.empty());
  EXPECT_EQ(h.m.stats().num_missed_tokens, 5 + 5);
}

TEST(PrefixCache, NamespacesAreConfirmedEvenWhenHashesCollide) {
  BlockManagerOptions options;
  options.hash_fn = &hash_ignoring_namespace;
  Harness h(2, 16, options);
  const KvNamespace tenant_a{1, 2, 100}, tenant_b{1, 2, 200};
  h.release(h.run({1, 2, 3, 4, 5}, {tenant_a, 0}));
  EXPECT_EQ(h.cached_tokens({1, 2, 3, 4, 5}, tenant_a), 4);
  EXPECT_EQ(h.cached_tokens({1, 2, 3, 4, 5}, tenant_b), 0);
  EXPECT_EQ(h.cached_tokens({1, 2, 3, 4, 5}, KvNamespace{9, 2, 100}), 0);  // another model
}

TEST(PrefixCache, SaltsIsolateTenants) {
  Harness h(2, 16);
  const KvNamespace tenant_a{1, 2, hash_string("tenant-a")}, tenant_b{1, 2, hash_string("tenant-b")};
  const std::vector<int32_t> prompt = {5, 6, 7, 8, 9};
  const SeqId a = h.run(prompt, {tenant_a, 0});
  const SeqId b = h.run(prompt, {tenant_b, 0});
  EXPECT_EQ(h.m.stats().num_hit_tokens, 0);
  EXPECT_NE(h.m.block_table(a)[0], h.m.block_table(b)[0]);
  EXPECT_EQ(h.cached_tokens(prompt, tenant_a), 4);
  EXPECT_EQ(h.cached_tokens(prompt, tenant_b), 4);
  PrefixMatch hit = h.m.match_prefix(prompt, tenant_b);
  ASSERT_EQ(hit.num_blocks(), 2);
  EXPECT_EQ(hit.blocks()[0], h.m.block_table(b)[0]);
}

TEST(CopyOnWrite, CopiesExactlyWhenWritingASharedPartialBlock) {
  Harness h(4, 16);
  const SeqId a = h.run({1, 2, 3, 4, 5, 6});
  const SeqId b = h.m.fork(a);
  h.m.check_integrity();
  const std::vector<int32_t> shared = h.m.block_table(a);
  for (int32_t block : shared) EXPECT_EQ(h.pool.ref_count(block), 2);
  const KvPlan plan = h.m.plan(b, 1);
  EXPECT_EQ(plan.num_copies, 1);
  EXPECT_EQ(plan.num_new_blocks, 1);

  std::vector<BlockCopy> copies = h.append(b, {7});
  ASSERT_EQ(copies.size(), 1u);
  EXPECT_EQ(copies[0].src_block, shared[1]);
  EXPECT_EQ(copies[0].dst_block, h.m.block_table(b)[1]);
  EXPECT_EQ(h.m.block_table(b)[0], shared[0]);  // the full block stays shared
  EXPECT_EQ(h.pool.ref_count(shared[0]), 2);
  EXPECT_EQ(h.pool.ref_count(shared[1]), 1);
  EXPECT_TRUE(h.append(a, {8}).empty());  // a is now the only holder: writes in place
  EXPECT_TRUE(h.append(b, {9}).empty());
  EXPECT_EQ(h.m.stats().num_cow_copies, 1);

  // A fork whose last block is full shares it without ever copying.
  const SeqId c = h.run({1, 2, 3, 4, 5, 6, 7, 8});
  const SeqId d = h.m.fork(c);
  EXPECT_TRUE(h.append(d, {1}).empty());
  EXPECT_TRUE(h.append(c, {2}).empty());
  EXPECT_EQ(h.m.stats().num_cow_copies, 1);
  for (SeqId s : {a, b, c, d}) h.release(s);
}

TEST(CopyOnWrite, WritingIntoACommittedBlockAfterTruncateCopiesIt) {
  Harness h(4, 16);
  const std::vector<int32_t> prompt = {1, 2, 3, 4, 5, 6, 7, 8, 9};
  const SeqId a = h.run(prompt);
  const int32_t committed = h.m.block_table(a)[1];
  h.m.truncate(a, 6);  // rejected tokens: cut into the committed second block
  h.m.check_integrity();
  EXPECT_EQ(h.m.plan(a, 1).num_copies, 1);
  const std::vector<BlockCopy> copies = h.append(a, {70});
  ASSERT_EQ(copies.size(), 1u);
  EXPECT_EQ(copies[0].src_block, committed);
  EXPECT_EQ(h.pool.state(committed), BlockState::kCached);  // intact and still matchable
  EXPECT_EQ(h.cached_tokens(prompt), 8);
  h.m.commit(a);
  h.append(a, {80});
  h.m.commit(a);
  EXPECT_EQ(h.cached_tokens({1, 2, 3, 4, 5, 6, 70, 80, 0}), 8);
  h.release(a);
}

TEST(CopyOnWrite, CompatibilityAppendCopiesTheBytesItself) {
  Harness h(4, 8);
  const SeqId a = h.m.add_sequence(16);
  std::vector<int64_t> slots(6);
  ASSERT_TRUE(h.m.append(a, 6, slots));
  const auto view = h.pool.layer_view(1);
  const int64_t row_bytes = view.slot_elems() * 4;
  auto* v = static_cast<uint8_t*>(view.v);
  std::memset(v + slots[5] * row_bytes, 0x5a, static_cast<size_t>(row_bytes));
  const SeqId b = h.m.fork(a);
  ASSERT_TRUE(h.m.append(b, 1, slots));
  h.m.check_integrity();
  const int32_t dst = h.m.block_table(b)[1];
  EXPECT_NE(dst, h.m.block_table(a)[1]);
  EXPECT_EQ(v[(dst * 4 + 1) * row_bytes], 0x5a);
  h.release(a);
  h.release(b);
}

TEST(Eviction, PressureNeverTakesBlocksInUseOrPinned) {
  Harness h(2, 6);
  const std::vector<int32_t> p1 = {1, 2, 3, 4, 9}, p2 = {5, 6, 7, 8, 9};
  h.release(h.run({1, 2, 3, 4}));
  h.release(h.run({5, 6, 7, 8}));
  EXPECT_EQ(h.pool.num_cached(), 4);
  EXPECT_EQ(h.pool.num_free(), 2);
  PrefixMatch pinned = h.m.match_prefix(p1, KvNamespace{});
  ASSERT_EQ(pinned.num_tokens(), 4);
  EXPECT_EQ(h.m.num_available_blocks(), 4);
  EXPECT_EQ(h.m.plan(p1, KvNamespace{}).num_available, 4);  // its blocks are pinned already

  const SeqId c = h.m.add_sequence(64);
  h.append(c, {20, 21, 22, 23, 24, 25, 26, 27});  // 2 free + 2 evicted
  EXPECT_EQ(h.m.stats().num_evictions, 2);
  EXPECT_EQ(h.cached_tokens(p2), 0);
  EXPECT_EQ(h.cached_tokens(p1), 4);
  for (int32_t b : pinned.blocks()) EXPECT_EQ(h.pool.state(b), BlockState::kCached);
  std::vector<int64_t> slots(2);
  std::vector<BlockCopy> copies;
  const std::vector<int32_t> more = {28, 29};
  EXPECT_FALSE(h.m.plan(c, 1).fits());
  EXPECT_FALSE(h.m.append(c, more, slots, copies));  // everything left is in use or pinned
  EXPECT_EQ(h.m.length(c), 8);
  h.m.check_integrity();

  pinned.reset();
  EXPECT_EQ(h.m.num_available_blocks(), 2);
  h.append(c, std::span<const int32_t>(more).first(1));
  EXPECT_EQ(h.cached_tokens(p1), 2);  // the leaf went first; the prefix stays reachable
  h.append(c, std::span<const int32_t>(more).first(2));
  EXPECT_EQ(h.cached_tokens(p1), 0);
  EXPECT_EQ(h.m.stats().num_evictions, 4);
  EXPECT_EQ(h.m.num_available_blocks(), 0);
  h.release(c);
}

// Which of the one-block prompts X = {1,1,0}, Y = {2,2,0}, Z = {3,3,0} are still cached.
std::string survivors(const Harness& h) {
  std::string out;
  if (h.cached_tokens({1, 1, 0}) == 2) out += 'X';
  if (h.cached_tokens({2, 2, 0}) == 2) out += 'Y';
  if (h.cached_tokens({3, 3, 0}) == 2) out += 'Z';
  return out;
}

// An uncommitted sequence one block larger than the free list: evicts exactly one cached block.
void press(Harness& h) {
  const SeqId s = h.m.add_sequence(64);
  h.append(s, std::vector<int32_t>(static_cast<size_t>(2 * (h.pool.num_free() + 1)), 9));
  h.release(s);
}

BlockManagerOptions with_policy(EvictionPolicyKind kind) {
  BlockManagerOptions options;
  options.eviction = kind;
  return options;
}

TEST(Eviction, LruTakesTheLeastRecentlyUsed) {
  Harness h(2, 4, with_policy(EvictionPolicyKind::kLru));
  for (int32_t t : {1, 2, 3}) h.release(h.run({t, t, 0}));
  h.touch({1, 1, 0});
  EXPECT_EQ(survivors(h), "XYZ");
  press(h);
  EXPECT_EQ(survivors(h), "XZ");
  press(h);
  EXPECT_EQ(survivors(h), "X");
}

TEST(Eviction, LfuTakesTheLeastFrequentlyUsedThenTheOldest) {
  for (auto kind : {EvictionPolicyKind::kLfu, EvictionPolicyKind::kLru}) {
    Harness h(2, 4, with_policy(kind));
    h.release(h.run({1, 1, 0}));
    h.touch({1, 1, 0});
    h.touch({1, 1, 0});  // X: used 3 times, but before Y and Z
    h.release(h.run({2, 2, 0}));
    h.release(h.run({3, 3, 0}));
    press(h);
    EXPECT_EQ(survivors(h), kind == EvictionPolicyKind::kLfu ? "XZ" : "YZ") << eviction_policy_name(kind);
  }
}

TEST(Eviction, PriorityTakesTheLowestPriorityThenTheOldest) {
  for (auto kind : {EvictionPolicyKind::kPriority, EvictionPolicyKind::kLru}) {
    Harness h(2, 4, with_policy(kind));
    h.release(h.run({1, 1, 0}, {KvNamespace{}, 5}));
    h.release(h.run({2, 2, 0}, {KvNamespace{}, 0}));
    h.release(h.run({3, 3, 0}, {KvNamespace{}, 0}));
    h.touch({2, 2, 0}, {KvNamespace{}, 9});  // Y: the max of its users' priorities is now 9
    press(h);
    EXPECT_EQ(survivors(h), kind == EvictionPolicyKind::kPriority ? "XY" : "YZ") << eviction_policy_name(kind);
    press(h);
    EXPECT_EQ(survivors(h), "Y") << eviction_policy_name(kind);
  }
}

TEST(Eviction, ChainsAreEvictedFromTheLeavesUp) {
  for (auto kind : {EvictionPolicyKind::kLru, EvictionPolicyKind::kLfu, EvictionPolicyKind::kPriority}) {
    Harness h(2, 4, with_policy(kind));
    const std::vector<int32_t> prompt = {1, 2, 3, 4, 5, 6, 7};
    h.release(h.run(prompt));
    EXPECT_EQ(h.pool.num_cached(), 3);
    const SeqId s = h.m.add_sequence(8);
    h.append(s, {9, 9});  // the free block
    for (int64_t cached : {4, 2, 0}) {
      h.append(s, {9, 9});
      EXPECT_EQ(h.cached_tokens(prompt), cached) << eviction_policy_name(kind);
    }
    h.release(s);
  }
}

}  // namespace
}  // namespace pagoda::kvcache

namespace pagoda::kvcache {
namespace {

struct RecordingListener : BlockEventListener {
  struct Stored {
    std::vector<BlockHash> hashes;
    BlockHash parent = 0;
    std::vector<int32_t> tokens;
  };
  std::vector<Stored> stored;
  std::vector<BlockInfo> evicted;
  BlockPool* pool = nullptr;
  std::vector<float> evicted_first_k;  // layer 0 K of the victim, read during the call
  void on_blocks_stored(std::span<const BlockInfo> chain) override {
    Stored s;
    s.parent = chain[0].parent_hash;
    for (const BlockInfo& b : chain) {
      s.hashes.push_back(b.hash);
      s.tokens.insert(s.tokens.end(), b.tokens.begin(), b.tokens.end());
    }
    stored.push_back(std::move(s));
  }
  void on_block_evicted(const BlockInfo& b) override {
    EXPECT_EQ(pool->state(b.block), BlockState::kCached);  // not yet freed: its bytes are intact
    std::vector<std::span<uint8_t>> segs(2 * pool->layout().n_layer);
    pool->block_segments(b.block, segs);
    float k0;
    std::memcpy(&k0, segs[0].data(), sizeof(k0));
    evicted_first_k.push_back(k0);
    evicted.push_back(b);
  }
};

TEST(BlockManager, ListenersHearStoredChainsAndEvictionsWhileBytesAreIntact) {
  auto pool = BlockPool::create(small_layout(2), 3);
  ASSERT_TRUE(pool.is_ok());
  BlockManager m(*pool);
  RecordingListener listener;
  listener.pool = &*pool;
  m.add_listener(&listener);
  const std::vector<int32_t> prompt = {1, 2, 3, 4, 5};
  SeqId a = m.add_sequence(8);
  std::vector<int64_t> slots(5);
  std::vector<BlockCopy> copies;
  ASSERT_TRUE(m.append(a, std::span<const int32_t>(prompt).first(3), slots, copies));
  m.commit(a);  // one full block
  ASSERT_TRUE(m.append(a, std::span<const int32_t>(prompt).subspan(3), slots, copies));
  m.commit(a);  // the second
  ASSERT_EQ(listener.stored.size(), 2u);
  EXPECT_EQ(listener.stored[0].parent, kRootBlockHash);
  EXPECT_EQ(listener.stored[0].tokens, (std::vector<int32_t>{1, 2}));
  EXPECT_EQ(listener.stored[1].parent, listener.stored[0].hashes[0]);
  EXPECT_EQ(listener.stored[1].tokens, (std::vector<int32_t>{3, 4}));
  const std::vector<int32_t> table = m.block_table(a);
  // Mark block 1's K so the listener can see it is read before the block is reused.
  std::vector<std::span<uint8_t>> segs(4);
  pool->block_segments(table[1], segs);
  const float mark = 42.5f;
  std::memcpy(segs[0].data(), &mark, sizeof(mark));
  m.free_sequence(a);
  EXPECT_TRUE(listener.evicted.empty());
  SeqId b = m.add_sequence(8);
  std::vector<int64_t> slots6(6);
  ASSERT_TRUE(m.append(b, 6, slots6));  // needs all 3 blocks: both cached ones are evicted, leaf first
  ASSERT_EQ(listener.evicted.size(), 2u);
  EXPECT_EQ(listener.evicted[0].hash, listener.stored[1].hashes[0]);
  EXPECT_EQ(listener.evicted[0].parent_hash, listener.stored[0].hashes[0]);
  EXPECT_EQ(listener.evicted_first_k[0], mark);
  EXPECT_EQ(listener.evicted[1].parent_hash, kRootBlockHash);
  m.remove_listener(&listener);
  m.check_integrity();
}

}  // namespace
}  // namespace pagoda::kvcache
