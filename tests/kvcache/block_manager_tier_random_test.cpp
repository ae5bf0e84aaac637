// Randomised runs of the block manager with a tier stack below it (a small host tier, then a
// FakeTier whose completions the test injects): admissions that probe the tiers and load blocks
// asynchronously (several loads in flight at once), prefills, frees, evictions that write back
// and demote, promotions, corrupt records, failed gets, a tier that dies. After every step:
// check_integrity() of the block manager, the stack and the host tier, and every computed
// position of every live sequence holds exactly the KV its tokens imply, so a load that copied
// the wrong block, a block freed under a get, or an eviction of a loading block shows up as
// wrong bytes or an abort.
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <optional>
#include <vector>

#include "core/rng.h"
#include "fake_tier.h"
#include "kvcache/block_manager.h"
#include "kvcache/host_tier.h"
#include "kvcache/tier_stack.h"

namespace pagoda::kvcache {
namespace {

using testing::FakeTier;

constexpr int64_t kBs = 2;
constexpr KvNamespace kNs{5, 6, 7};

KvLayout layout() {
  KvLayout l;
  l.n_layer = 2;
  l.n_kv_head = 1;
  l.head_dim = 2;
  l.block_size = kBs;
  return l;
}

uint64_t kv_of(std::span<const int32_t> tokens, size_t p) {
  uint64_t h = kNs.key();
  for (size_t i = 0; i <= p; ++i) {
    h = (h ^ static_cast<uint64_t>(tokens[i])) * 0x9E3779B97F4A7C15ull;
    h ^= h >> 29;
  }
  return h;
}

struct LiveSeq {
  std::vector<int32_t> prompt;
  int64_t cached = 0;                // tokens from the pool hit
  std::vector<BlockHash> chain;      // hashes of the whole blocks after the hit
  std::optional<ProbeId> probe;      // set while the tiers are asked
  std::optional<LoadId> load;        // set while its blocks load
};

class TierDriver {
 public:
  TierDriver(uint64_t seed, int64_t pool_blocks, int64_t host_blocks, int64_t fake_blocks)
      : rng_(seed), pool_(BlockPool::create(layout(), pool_blocks).value()), bm_(pool_),
        stack_(pool_, seed % 2 == 0 ? OffloadMode::kWriteBack : OffloadMode::kWriteThrough, clock_, logger_) {
    HostTierOptions o;
    o.layout = layout();
    o.capacity_bytes = host_blocks * ((record_bytes(record_meta_for(layout())) + 63) / 64 * 64);
    auto host = HostTier::create(o, clock_).value();
    host_ = host.get();
    stack_.add_tier(std::move(host));
    auto fake = std::make_unique<FakeTier>("fake", layout(), fake_blocks);
    fake_ = fake.get();
    stack_.add_tier(std::move(fake));
    bm_.add_listener(&stack_);
    for (int i = 0; i < 4; ++i) stems_.push_back(random_tokens(12));
  }
  ~TierDriver() {
    fake_->complete_all();  // no get may write into a freed block
    stack_.poll();
    for (auto& [s, live] : seqs_) {
      if (live.load) stack_.take_load(*live.load);
      if (live.probe) stack_.drop_probe(*live.probe);
    }
    bm_.remove_listener(&stack_);
  }

  void run(int steps) {
    for (int step = 0; step < steps; ++step) {
      const uint64_t op = rng_.next_u64() % 100;
      if (op < 30) {
        admit();
      } else if (op < 50) {
        finish_loads();
      } else if (op < 65) {
        free_one();
      } else if (op < 85) {
        const int64_t n = static_cast<int64_t>(rng_.next_u64() % 4);
        for (int64_t i = 0; i < n && fake_->num_queued() > 0; ++i) fake_->complete_next();
        stack_.poll();
      } else if (op < 92) {
        corrupt_one();
      } else if (op < 96) {
        fail_one();
      } else if (op == 99 && step > steps / 2 && !killed_) {
        fake_->disable();  // the bottom tier dies; everything goes on without it
        killed_ = true;
      }
      verify();
      if (::testing::Test::HasFailure()) FAIL() << "at step " << step << " (op " << op << ")";
    }
  }

  int64_t loaded_blocks = 0, recomputed_blocks = 0, corrupted = 0;
  const TierStack& stack() const { return stack_; }
  const BlockManager& bm() const { return bm_; }

 private:
  std::vector<int32_t> random_tokens(int64_t n) {
    std::vector<int32_t> t(static_cast<size_t>(n));
    for (auto& x : t) x = static_cast<int32_t>(rng_.next_u64() % 3);
    return t;
  }
  void write_kv(const std::vector<int32_t>& tokens, SeqId s, int64_t from, int64_t to) {
    const auto& table = bm_.block_table(s);
    for (int64_t p = from; p < to; ++p) {
      const int64_t slot = table[p / kBs] * kBs + p % kBs;
      const uint64_t v = kv_of(tokens, static_cast<size_t>(p)), inv = ~v;
      std::memcpy(static_cast<uint8_t*>(pool_.layer_view(0).k) + slot * 8, &v, 8);
      std::memcpy(static_cast<uint8_t*>(pool_.layer_view(1).v) + slot * 8, &inv, 8);
    }
  }
  bool holds(SeqId s, const std::vector<int32_t>& tokens, int64_t p) {
    const int64_t slot = bm_.block_table(s)[p / kBs] * kBs + p % kBs;
    uint64_t k, v;
    std::memcpy(&k, static_cast<uint8_t*>(pool_.layer_view(0).k) + slot * 8, 8);
    std::memcpy(&v, static_cast<uint8_t*>(pool_.layer_view(1).v) + slot * 8, 8);
    const uint64_t want = kv_of(tokens, static_cast<size_t>(p));
    return k == want && v == ~want;
  }
  // Prefills the rest of a sequence's prompt (after its pool hit and loads) and commits.
  void prefill(SeqId s) {
    LiveSeq& live = seqs_[s];
    const int64_t from = bm_.length(s);
    const std::vector<int32_t> rest(live.prompt.begin() + from, live.prompt.end());
    std::vector<int64_t> slots(rest.size());
    std::vector<BlockCopy> copies;
    if (!bm_.append(s, rest, slots, copies)) {  // no room: give up on it
      bm_.free_sequence(s);
      seqs_.erase(s);
      return;
    }
    for (const BlockCopy& c : copies) pool_.copy_block(c.src_block, c.dst_block);
    write_kv(live.prompt, s, from, static_cast<int64_t>(live.prompt.size()));
    bm_.commit(s);
  }
  void admit() {
    if (seqs_.size() >= 5) return;
    const auto& stem = stems_[rng_.next_u64() % stems_.size()];
    std::vector<int32_t> prompt(stem.begin(), stem.begin() + static_cast<ptrdiff_t>(rng_.next_u64() % (stem.size() + 1)));
    const auto tail = random_tokens(1 + static_cast<int64_t>(rng_.next_u64() % 5));
    prompt.insert(prompt.end(), tail.begin(), tail.end());
    PrefixMatch hit = bm_.match_prefix(prompt, kNs);
    const KvPlan plan = bm_.plan(hit, static_cast<int64_t>(prompt.size()));
    if (!plan.fits()) return;
    const SeqId s = bm_.add_sequence(64, {kNs, static_cast<int32_t>(rng_.next_u64() % 2)});
    const int64_t cached = hit.num_tokens();
    const BlockHash parent = cached > 0 ? bm_.index().hash(hit.blocks().back()) : kRootBlockHash;
    bm_.adopt(s, std::move(hit));
    seqs_[s].prompt = prompt;
    const int64_t max_blocks = (static_cast<int64_t>(prompt.size()) - 1) / kBs;
    std::vector<BlockHash> chain;
    chain_hashes(bm_.hash_fn(), parent,
                 std::span<const int32_t>(prompt).subspan(static_cast<size_t>(cached),
                                                          static_cast<size_t>(max_blocks * kBs - cached)),
                 kBs, kNs.key(), chain);
    seqs_[s].cached = cached;
    seqs_[s].chain = chain;
    if (chain.empty()) {
      prefill(s);
      return;
    }
    const ProbeId probe = stack_.probe(chain);
    if (std::optional<std::vector<TierRun>> runs = stack_.take_probe(probe)) {
      start_load(s, *runs);
    } else if (rng_.next_u64() % 4 == 0) {
      stack_.drop_probe(probe);  // not worth waiting for (as the cost model may decide)
      prefill(s);
    } else {
      seqs_[s].probe = probe;  // waits for the slow tier's answer
    }
  }
  void start_load(SeqId s, const std::vector<TierRun>& runs) {
    LiveSeq& live = seqs_[s];
    int64_t n_load = 0;
    for (const TierRun& r : runs) n_load += r.count;
    if (n_load == 0 || !bm_.begin_load(s, std::span<const int32_t>(live.prompt).subspan(static_cast<size_t>(live.cached),
                                                                                         static_cast<size_t>(n_load * kBs)))) {
      prefill(s);
      return;
    }
    const auto blocks = bm_.loading_blocks(s);
    std::vector<LoadItem> items;
    for (const TierRun& r : runs) {
      for (int64_t i = r.begin; i < r.begin + r.count; ++i) {
        items.push_back({blocks[static_cast<size_t>(i)], live.chain[static_cast<size_t>(i)], r.tier});
      }
    }
    live.load = stack_.load(kNs, items);
  }
  void finish_loads() {
    stack_.poll();
    std::vector<std::pair<SeqId, std::vector<TierRun>>> probed;
    for (auto& [s, live] : seqs_) {
      if (!live.probe) continue;
      if (std::optional<std::vector<TierRun>> runs = stack_.take_probe(*live.probe)) {
        live.probe.reset();
        probed.emplace_back(s, std::move(*runs));
      }
    }
    for (const auto& [s, runs] : probed) start_load(s, runs);
    std::vector<SeqId> done;
    for (auto& [s, live] : seqs_) {
      if (!live.load) continue;
      std::optional<LoadResult> r = stack_.take_load(*live.load);
      if (!r) continue;
      live.load.reset();
      const int64_t n_loading = static_cast<int64_t>(bm_.loading_blocks(s).size());
      const int64_t confirmed = bm_.finish_load(s, r->num_ok, r->tokens);
      EXPECT_EQ(confirmed, r->num_ok) << "a verified record with other tokens (the hash is real)";
      loaded_blocks += confirmed;
      recomputed_blocks += n_loading - confirmed;
      done.push_back(s);
    }
    for (SeqId s : done) prefill(s);
  }
  void free_one() {
    if (seqs_.empty()) return;
    auto it = seqs_.begin();
    std::advance(it, rng_.next_u64() % seqs_.size());
    if (it->second.load) return;  // a get may still write into its blocks
    if (it->second.probe) stack_.drop_probe(*it->second.probe);
    bm_.free_sequence(it->first);
    seqs_.erase(it);
  }
  void corrupt_one() {
    for (const auto& stem : stems_) {
      std::vector<BlockHash> chain;
      chain_hashes(bm_.hash_fn(), kRootBlockHash, stem, kBs, kNs.key(), chain);
      const BlockHash h = chain[rng_.next_u64() % chain.size()];
      if (fake_->holds(h)) {
        fake_->corrupt(h);
        ++corrupted;
        return;
      }
    }
  }
  void fail_one() {
    const auto& stem = stems_[rng_.next_u64() % stems_.size()];
    std::vector<BlockHash> chain;
    chain_hashes(bm_.hash_fn(), kRootBlockHash, stem, kBs, kNs.key(), chain);
    fake_->fail_get(chain[rng_.next_u64() % chain.size()]);
  }
  void verify() {
    bm_.check_integrity();
    stack_.check_integrity();
    host_->check_integrity();
    for (const auto& [s, live] : seqs_) {
      if (live.load) {
        ASSERT_TRUE(bm_.loading(s));
        continue;
      }
      if (live.probe) {
        ASSERT_EQ(bm_.length(s), live.cached);
        continue;
      }
      ASSERT_EQ(bm_.num_computed(s), static_cast<int64_t>(live.prompt.size()));
      for (int64_t p = 0; p < bm_.num_computed(s); ++p) {
        ASSERT_TRUE(holds(s, live.prompt, p)) << "sequence " << s << " position " << p;
      }
    }
  }

  Rng rng_;
  ManualClock clock_;
  Logger logger_{LogLevel::kError};
  BlockPool pool_;
  BlockManager bm_;
  TierStack stack_;
  HostTier* host_ = nullptr;
  FakeTier* fake_ = nullptr;
  std::map<SeqId, LiveSeq> seqs_;
  std::vector<std::vector<int32_t>> stems_;
  bool killed_ = false;
};

TEST(BlockManagerTierRandom, EvictDemotePromoteAndFailNeverCorruptKv) {
  for (uint64_t seed : {1, 2, 3, 4}) {
    SCOPED_TRACE(seed);
    TierDriver d(seed, /*pool=*/24, /*host=*/6, /*fake=*/40);
    d.run(3000);
    EXPECT_GT(d.loaded_blocks, 0) << "promotions happened";
    EXPECT_GT(d.recomputed_blocks, 0) << "failed loads happened";
    EXPECT_GT(d.corrupted, 0);
    EXPECT_GT(d.bm().stats().num_evictions, 0);
    EXPECT_GT(d.stack().counters(1).demoted_blocks, 0) << "the host demoted";
    EXPECT_GT(d.stack().counters(1).loaded_blocks, 0) << "the bottom tier promoted";
  }
}

}  // namespace
}  // namespace pagoda::kvcache
