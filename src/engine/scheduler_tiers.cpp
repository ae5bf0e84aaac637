// Scheduler: admission through the lower tiers (the protocol is at the top of
// engine/scheduler.h): probes, the load-vs-recompute decision, loads and their completion.
#include <algorithm>

#include "engine/load_cost.h"
#include "engine/scheduler.h"

namespace pagoda::engine {

std::string_view preemption_mode_name(PreemptionMode mode) { return mode == PreemptionMode::kSwap ? "swap" : "recompute"; }

std::optional<PreemptionMode> preemption_mode_from_name(std::string_view name) {
  if (name == "recompute") return PreemptionMode::kRecompute;
  if (name == "swap") return PreemptionMode::kSwap;
  return std::nullopt;
}

bool Scheduler::can_swap() const {
  const kvcache::TierStack* tiers = options_.tiers;
  return tiers != nullptr && !tiers->empty() && tiers->tier(0).medium() == "CPU" && tiers->tier(0).enabled() &&
         options_.enable_prefix_caching && !options_.windows.on;
}

bool Scheduler::swap_out(SchedSequence& seq) {
  if (!can_swap() || uncached(seq)) {  // a selecting sequence's blocks have no hashes: recompute
    ++plan_.swap_fallbacks;
    return false;
  }
  blocks_.committed_blocks(seq.kv, swap_scratch_);
  if (swap_scratch_.empty()) return false;  // nothing whole to keep: the tail is recomputed anyway
  options_.tiers->put_blocks(0, swap_scratch_);
  plan_.swapped_out_blocks += static_cast<int64_t>(swap_scratch_.size());
  return true;
}

int64_t Scheduler::num_loading() const {
  int64_t n = static_cast<int64_t>(detached_.size());
  for (const SchedSequence* s : running_) n += s->loading();
  return n;
}

void Scheduler::poll_tiers() {
  kvcache::TierStack& tiers = *options_.tiers;
  tiers.poll();
  if (options_.load_cost != nullptr) {  // measured load bandwidth per tier
    for (int t = 0; t < tiers.num_tiers(); ++t) {
      const kvcache::TierCounters& c = tiers.counters(t);
      const size_t i = static_cast<size_t>(t);
      if (c.loaded_bytes == seen_load_bytes_[i]) continue;
      options_.load_cost->observe_load(t, media_[i], c.loaded_bytes - seen_load_bytes_[i], c.load_ns - seen_load_ns_[i]);
      seen_load_bytes_[i] = c.loaded_bytes;
      seen_load_ns_[i] = c.load_ns;
    }
  }
  for (SchedSequence* s : running_) {
    if (!s->loading()) continue;
    std::optional<kvcache::LoadResult> r = tiers.take_load(s->load);
    if (!r) continue;
    finish_load(*s, *r);
    plan_.loaded.push_back(s);
  }
  for (size_t i = 0; i < detached_.size();) {
    if (tiers.take_load(detached_[i].load)) {
      blocks_.free_sequence(detached_[i].kv);
      detached_[i] = detached_.back();
      detached_.pop_back();
    } else {
      ++i;
    }
  }
}

// Drops the first n blocks of runs (consecutive from chain[0]); the rest start at chain[0].
static void skip_front(std::vector<kvcache::TierRun>& runs, int64_t n) {
  size_t kept = 0;
  for (const kvcache::TierRun& r : runs) {
    const int64_t begin = std::max<int64_t>(r.begin - n, 0);
    const int64_t end = r.begin + r.count - n;
    if (end > begin) runs[kept++] = {r.tier, begin, end - begin};
  }
  runs.resize(kept);
}

bool Scheduler::plan_load(SchedSequence& seq, const kvcache::PrefixMatch& hit, std::vector<kvcache::LoadItem>& items,
                          int64_t& n_load_tokens) {
  kvcache::TierStack& tiers = *options_.tiers;
  n_load_tokens = 0;
  seq.load_runs.clear();
  const int64_t bs = blocks_.pool().layout().block_size;
  const int64_t n_tokens = static_cast<int64_t>(seq.tokens.size());
  const int64_t max_blocks = (n_tokens - 1) / bs;  // the last token is always computed
  if (tiers.empty() || hit.num_blocks() >= max_blocks) {
    if (seq.probe != 0) tiers.drop_probe(seq.probe);
    seq.probe = 0;
    return true;
  }
  if (seq.probe == 0) {
    const kvcache::BlockHash parent = hit.empty() ? kvcache::kRootBlockHash : blocks_.index().hash(hit.blocks().back());
    const std::span<const int32_t> rest =
        std::span<const int32_t>(seq.tokens).subspan(static_cast<size_t>(hit.num_tokens()),
                                                     static_cast<size_t>((max_blocks - hit.num_blocks()) * bs));
    kvcache::chain_hashes(blocks_.hash_fn(), parent, rest, bs, seq.ns.key(), chain_scratch_);
    seq.probe = tiers.probe(chain_scratch_);
    seq.probe_from = hit.num_blocks();
  }
  std::optional<std::vector<kvcache::TierRun>> runs = tiers.take_probe(seq.probe);
  if (!runs) return false;
  seq.probe = 0;
  // A probe answered in a later step (a remote tier) ran after the pool hit of its time, and the
  // pool may have changed since. Grown (another sequence computed or loaded the same blocks):
  // the runs start `grown` blocks before the hit and those are skipped. Shrunk (evicted): the
  // runs leave a gap after the hit, so the tiers are probed again from the hit.
  const int64_t grown = hit.num_blocks() - seq.probe_from;
  if (grown < 0) return plan_load(seq, hit, items, n_load_tokens);
  skip_front(*runs, grown);
  int64_t n_blocks = 0;
  for (const kvcache::TierRun& r : *runs) n_blocks += r.count;
  if (n_blocks == 0) return true;
  // A swapped sequence loads what the tiers hold of it (that is what --preemption swap asks).
  const int64_t chosen = options_.load_cost != nullptr && !seq.swapped
                             ? options_.load_cost->decide(*runs, media_, blocks_.pool().layout().bytes_per_block(), bs)
                             : n_blocks;
  int64_t left = chosen;
  for (const kvcache::TierRun& r : *runs) {
    if (left == 0) break;
    kvcache::TierRun cut = r;
    cut.count = std::min(cut.count, left);
    left -= cut.count;
    seq.load_runs.push_back(cut);
  }
  n_load_tokens = chosen * bs;
  items.clear();
  return true;
}

void Scheduler::start_load(SchedSequence& seq, int64_t cached, std::vector<kvcache::LoadItem>& items,
                           int64_t n_load_tokens) {
  const int64_t bs = blocks_.pool().layout().block_size;
  const std::span<const int32_t> load_tokens =
      std::span<const int32_t>(seq.tokens).subspan(static_cast<size_t>(cached), static_cast<size_t>(n_load_tokens));
  // The plan that admitted seq counted these blocks among its new ones: they fit.
  CHECK(blocks_.begin_load(seq.kv, load_tokens)) << "loading blocks beyond the admission plan";
  const kvcache::BlockHash parent =
      cached > 0 ? blocks_.index().hash(blocks_.block_table(seq.kv)[static_cast<size_t>(cached / bs - 1)])
                 : kvcache::kRootBlockHash;
  kvcache::chain_hashes(blocks_.hash_fn(), parent, load_tokens, bs, seq.ns.key(), chain_scratch_);
  const std::span<const int32_t> pool_blocks = blocks_.loading_blocks(seq.kv);
  items.clear();
  int64_t i = 0;
  for (const kvcache::TierRun& r : seq.load_runs) {
    for (int64_t k = 0; k < r.count; ++k, ++i) {
      items.push_back({pool_blocks[static_cast<size_t>(i)], chain_scratch_[static_cast<size_t>(i)], r.tier});
    }
  }
  seq.load = options_.tiers->load(seq.ns, items);
}

void Scheduler::finish_load(SchedSequence& seq, const kvcache::LoadResult& result) {
  const int64_t bs = blocks_.pool().layout().block_size;
  const int64_t confirmed = blocks_.finish_load(seq.kv, result.num_ok, result.tokens);
  seq.load = 0;
  if (seq.swap_in) plan_.swapped_in_blocks += confirmed;
  seq.swap_in = false;
  int64_t left = confirmed;
  for (const kvcache::TierRun& r : seq.load_runs) {
    const int64_t n = std::min(left, r.count);
    seq.admitted_tier[static_cast<size_t>(r.tier)] += n * bs;
    left -= n;
  }
  seq.admitted_cached = blocks_.length(seq.kv);
  seq.fed = seq.admitted_cached;  // what did not load or confirm is fed (recomputed) from here
  plan_.prefix_hit_tokens += confirmed * bs;  // the hit rate counts every tier
}

}  // namespace pagoda::engine
