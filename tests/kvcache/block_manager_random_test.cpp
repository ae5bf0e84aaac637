// Randomised operation sequences against a model of the expected state, with the engine's
// protocol (match -> adopt -> append -> copies -> forward -> commit; fork, truncate, free, pins)
// and a stand-in forward pass that writes, for every position, a hash of its namespace and all
// tokens up to it into the position's KV slot. Every step checks integrity and that every live
// sequence, every prefix hit and every pinned block reads exactly the KV its tokens imply, so a
// wrong hit, a missed copy or an eviction of a block in use or pinned shows up as wrong bytes.
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "core/rng.h"
#include "expected_kv.h"
#include "kvcache/block_manager.h"

namespace pagoda::kvcache {
namespace {

KvLayout tiny_layout(int64_t block_size) {
  KvLayout l;
  l.n_layer = 2;
  l.n_kv_head = 1;
  l.head_dim = 2;  // f32: one 8-byte row per slot
  l.block_size = block_size;
  return l;
}

using testing::expected_kv;  // expected_kv.h

// Writes a value into layer 0's K row and its complement into layer 1's V row of a slot.
class FakeKv {
 public:
  explicit FakeKv(BlockPool& pool)
      : k_(static_cast<uint8_t*>(pool.layer_view(0).k)), v_(static_cast<uint8_t*>(pool.layer_view(1).v)) {}
  void write(int64_t slot, uint64_t value) {
    const uint64_t inverse = ~value;
    std::memcpy(k_ + slot * 8, &value, 8);
    std::memcpy(v_ + slot * 8, &inverse, 8);
  }
  bool holds(int64_t slot, uint64_t value) const {
    uint64_t k, v;
    std::memcpy(&k, k_ + slot * 8, 8);
    std::memcpy(&v, v_ + slot * 8, 8);
    return k == value && v == ~value;
  }

 private:
  uint8_t* k_;
  uint8_t* v_;
};

struct ModelSeq {
  std::vector<int32_t> tokens;
  KvNamespace ns;
  int64_t computed = 0;
};

struct ModelPin {
  PrefixMatch match;
  std::vector<int32_t> tokens;
  KvNamespace ns;
};

class Driver {
 public:
  // exact: a pool too large to evict, so every hit length is predicted from the model.
  Driver(int64_t block_size, int64_t num_blocks, EvictionPolicyKind policy, uint64_t seed, bool exact)
      : bs_(block_size),
        exact_(exact),
        rng_(seed),
        pool_(BlockPool::create(tiny_layout(block_size), num_blocks).value()),
        m_(pool_, BlockManagerOptions{policy, nullptr, &hash_block}),
        kv_(pool_) {
    namespaces_[0] = KvNamespace{1, 1, 100};
    namespaces_[1] = KvNamespace{1, 1, 200};
    for (int i = 0; i < 3; ++i) stems_.push_back(random_tokens(3 * block_size + i));
  }

  void run(int steps) {
    for (int step = 0; step < steps; ++step) {
      const uint64_t op = rng_.next_u64() % 100;
      if (op < 25) {
        admit();
      } else if (op < 60) {
        if (auto s = pick()) extend(*s, random_tokens(1 + static_cast<int64_t>(rng_.next_u64() % 6)));
      } else if (op < 68) {
        if (auto s = pick(); s && seqs_[*s].computed == static_cast<int64_t>(seqs_[*s].tokens.size())) {
          seqs_[m_.fork(*s)] = seqs_[*s];
        }
      } else if (op < 76) {
        if (auto s = pick()) truncate(*s);
      } else if (op < 90) {
        if (auto s = pick()) {
          m_.free_sequence(*s);
          seqs_.erase(*s);
        }
      } else if (op < 95) {
        if (pins_.size() < 3) pin();
      } else if (!pins_.empty()) {
        pins_.erase(pins_.begin() + static_cast<ptrdiff_t>(rng_.next_u64() % pins_.size()));
      }
      verify();
      if (::testing::Test::HasFatalFailure() || ::testing::Test::HasNonfatalFailure()) {
        FAIL() << "at step " << step << " (op " << op << ")";
      }
    }
    if (exact_) {
      EXPECT_EQ(m_.stats().num_evictions, 0) << "pool too small for an exact run";
    }
  }

  const BlockManagerStats& stats() const { return m_.stats(); }

 private:
  std::vector<int32_t> random_tokens(int64_t n) {
    std::vector<int32_t> t(static_cast<size_t>(n));
    for (auto& x : t) x = static_cast<int32_t>(rng_.next_u64() % 4);  // tiny vocabulary: many shared blocks
    return t;
  }
  std::optional<SeqId> pick() {
    if (seqs_.empty()) return std::nullopt;
    auto it = seqs_.begin();
    std::advance(it, rng_.next_u64() % seqs_.size());
    return it->first;
  }
  std::vector<int32_t> random_prompt() {
    const auto& stem = stems_[rng_.next_u64() % stems_.size()];
    std::vector<int32_t> p(stem.begin(), stem.begin() + static_cast<ptrdiff_t>(rng_.next_u64() % (stem.size() + 1)));
    const auto tail = random_tokens(1 + static_cast<int64_t>(rng_.next_u64() % 12));
    p.insert(p.end(), tail.begin(), tail.end());
    return p;
  }
  int64_t expected_hit(const std::vector<int32_t>& prompt, const KvNamespace& ns) const {
    const int64_t cap = (static_cast<int64_t>(prompt.size()) - 1) / bs_;
    int64_t k = 0;
    while (k < cap && committed_.count({ns.cache_salt, std::vector<int32_t>(prompt.begin(), prompt.begin() + (k + 1) * bs_)})) ++k;
    return k * bs_;
  }
  // A hit must be capped, block aligned, predicted (exact runs) and hold the right KV.
  void check_hit(const PrefixMatch& hit, const std::vector<int32_t>& prompt, const KvNamespace& ns) {
    const int64_t n = static_cast<int64_t>(prompt.size());
    EXPECT_LE(hit.num_tokens(), (n - 1) / bs_ * bs_);
    EXPECT_EQ(hit.num_tokens(), hit.num_blocks() * bs_);
    if (exact_) {
      EXPECT_EQ(hit.num_tokens(), expected_hit(prompt, ns));
    }
    const auto kv = expected_kv(ns, prompt);
    for (int64_t i = 0; i < hit.num_tokens(); ++i) {
      ASSERT_TRUE(kv_.holds(hit.blocks()[i / bs_] * bs_ + i % bs_, kv[i])) << "hit position " << i;
    }
  }

  void admit() {
    if (seqs_.size() >= 8) return;
    const KvNamespace ns = namespaces_[rng_.next_u64() % 2];
    const std::vector<int32_t> prompt = random_prompt();
    const KvPlan dry = m_.plan(prompt, ns);  // pins nothing
    PrefixMatch hit = m_.match_prefix(prompt, ns);
    check_hit(hit, prompt, ns);
    const KvPlan plan = m_.plan(hit, static_cast<int64_t>(prompt.size()));
    EXPECT_EQ(plan.num_cached_tokens, hit.num_tokens());
    EXPECT_EQ(dry.num_cached_tokens, plan.num_cached_tokens);
    EXPECT_EQ(dry.num_new_blocks, plan.num_new_blocks);
    EXPECT_EQ(dry.num_available, plan.num_available);
    const SeqId s = m_.add_sequence(256, {ns, static_cast<int32_t>(rng_.next_u64() % 3)});
    const int64_t cached = hit.num_tokens();
    m_.adopt(s, std::move(hit));
    seqs_[s] = ModelSeq{std::vector<int32_t>(prompt.begin(), prompt.begin() + cached), ns, cached};
    const std::vector<int32_t> rest(prompt.begin() + cached, prompt.end());
    if (extend(s, rest) != plan.fits()) ADD_FAILURE() << "plan and append disagree";
    if (!plan.fits()) {  // not admitted
      m_.free_sequence(s);
      seqs_.erase(s);
    }
  }

  // append -> copies -> forward -> (usually) commit. Returns whether the append fit.
  bool extend(SeqId s, const std::vector<int32_t>& tokens) {
    ModelSeq& model = seqs_[s];
    if (model.tokens.size() + tokens.size() > 200) return false;
    const int64_t n = static_cast<int64_t>(tokens.size());
    const KvPlan plan = m_.plan(s, n);
    std::vector<int64_t> slots(tokens.size());
    std::vector<BlockCopy> copies;
    const bool ok = m_.append(s, tokens, slots, copies);
    EXPECT_EQ(ok, plan.fits());
    if (!ok) {
      EXPECT_TRUE(copies.empty());
      return false;
    }
    EXPECT_EQ(static_cast<int64_t>(copies.size()), plan.num_copies);
    for (const BlockCopy& c : copies) pool_.copy_block(c.src_block, c.dst_block);
    const int64_t begin = static_cast<int64_t>(model.tokens.size());
    model.tokens.insert(model.tokens.end(), tokens.begin(), tokens.end());
    const auto kv = expected_kv(model.ns, model.tokens);
    for (int64_t i = 0; i < n; ++i) kv_.write(slots[i], kv[begin + i]);  // the forward pass
    if (rng_.next_u64() % 5 != 0) commit(s);
    return true;
  }

  void commit(SeqId s) {
    ModelSeq& model = seqs_[s];
    m_.commit(s);
    model.computed = static_cast<int64_t>(model.tokens.size());
    for (int64_t k = 1; k <= model.computed / bs_; ++k) {
      committed_.insert({model.ns.cache_salt, std::vector<int32_t>(model.tokens.begin(), model.tokens.begin() + k * bs_)});
    }
  }

  void truncate(SeqId s) {
    ModelSeq& model = seqs_[s];
    const int64_t keep = static_cast<int64_t>(rng_.next_u64() % (model.tokens.size() + 1));
    m_.truncate(s, keep);
    model.tokens.resize(static_cast<size_t>(keep));
    model.computed = std::min(model.computed, keep);
  }

  void pin() {
    const KvNamespace ns = namespaces_[rng_.next_u64() % 2];
    std::vector<int32_t> prompt = random_prompt();
    PrefixMatch hit = m_.match_prefix(prompt, ns);
    check_hit(hit, prompt, ns);
    pins_.push_back(ModelPin{std::move(hit), std::move(prompt), ns});
  }

  void verify() {
    m_.check_integrity();
    for (const auto& [s, model] : seqs_) {
      ASSERT_EQ(m_.length(s), static_cast<int64_t>(model.tokens.size()));
      ASSERT_EQ(m_.num_computed(s), model.computed);
      const auto& table = m_.block_table(s);
      const auto kv = expected_kv(model.ns, model.tokens);
      for (size_t p = 0; p < kv.size(); ++p) {
        ASSERT_TRUE(kv_.holds(table[p / bs_] * bs_ + static_cast<int64_t>(p) % bs_, kv[p]))
            << "sequence " << s << " position " << p;
      }
    }
    for (const ModelPin& pin : pins_) {
      for (int32_t b : pin.match.blocks()) {
        ASSERT_NE(pool_.state(b), BlockState::kFree) << "pinned block " << b << " evicted";
        ASSERT_TRUE(m_.index().contains(b));
      }
      const auto kv = expected_kv(pin.ns, pin.tokens);
      for (int64_t i = 0; i < pin.match.num_tokens(); ++i) {
        ASSERT_TRUE(kv_.holds(pin.match.blocks()[i / bs_] * bs_ + i % bs_, kv[i])) << "pinned position " << i;
      }
    }
  }

  const int64_t bs_;
  const bool exact_;
  Rng rng_;
  BlockPool pool_;
  BlockManager m_;
  FakeKv kv_;
  std::vector<ModelPin> pins_;  // destroyed before m_
  std::map<SeqId, ModelSeq> seqs_;
  std::set<std::pair<uint64_t, std::vector<int32_t>>> committed_;  // (salt, full-block prefix)
  KvNamespace namespaces_[2];
  std::vector<std::vector<int32_t>> stems_;
};

TEST(BlockManagerRandom, ExactHitsWithoutPressure) {
  for (int64_t bs : {1, 3, 8}) {
    SCOPED_TRACE(bs);
    Driver driver(bs, 16384, EvictionPolicyKind::kLru, 100 + static_cast<uint64_t>(bs), /*exact=*/true);
    driver.run(1500);
    EXPECT_GT(driver.stats().num_hit_tokens, 0);
    if (bs > 1) {  // a 1-token block is never partial
      EXPECT_GT(driver.stats().num_cow_copies, 0);
    }
  }
}

TEST(BlockManagerRandom, PressureNeverCorruptsKv) {
  for (auto policy : {EvictionPolicyKind::kLru, EvictionPolicyKind::kLfu, EvictionPolicyKind::kPriority}) {
    for (int64_t bs : {1, 2, 4}) {
      SCOPED_TRACE(std::string(eviction_policy_name(policy)) + " bs " + std::to_string(bs));
      Driver driver(bs, 96 / bs, policy, 7 + static_cast<uint64_t>(bs), /*exact=*/false);
      driver.run(2500);
      EXPECT_GT(driver.stats().num_evictions, 0);
      EXPECT_GT(driver.stats().num_hit_tokens, 0);
      if (bs > 1) {
        EXPECT_GT(driver.stats().num_cow_copies, 0);
      }
    }
  }
}

}  // namespace
}  // namespace pagoda::kvcache
