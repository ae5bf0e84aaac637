// Engine: loading a prompt's prefix from the lower tiers on generate's blocking path (the
// serving loop does the same without waiting: engine/scheduler_tiers.cpp).
#include <sched.h>

#include <algorithm>

#include "engine/engine.h"

namespace pagoda::engine {

Result<double> Engine::calibrate_load_cost() {
  if (load_cost_ == nullptr) return Status::invalid_argument("no KV tiers attached: nothing to calibrate");
  const int64_t n = std::min({kCalibrationTokens, prefill_chunk(), max_context_});
  const int64_t n_vocab = model_->config().n_vocab;
  std::vector<int32_t> tokens(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) tokens[static_cast<size_t>(i)] = static_cast<int32_t>((i * 7919 + 13) % n_vocab);
  int64_t ns = 0;
  for (int run = 0; run < 2; ++run) {  // the first run faults the weights in and warms the caches
    kvcache::SequenceOptions options = sequence_options(kv_namespace(""), 0);
    options.cacheable = false;  // never in the prefix index, so never written to a tier
    if (blocks_->num_available_blocks() * kv_layout().block_size < n) {
      return Status::unavailable("the KV pool has no room for a calibration prefill of " + std::to_string(n) + " tokens");
    }
    SequenceGuard guard(*blocks_, blocks_->add_sequence(n, options));
    const StepSeq chunk{guard.seq(), tokens, /*logits=*/false};
    const int64_t start = clock_->now_ns();
    PAGODA_RETURN_IF_ERROR(step(std::span<const StepSeq>(&chunk, 1), false, nullptr));
    ns = clock_->now_ns() - start;
  }
  if (ns <= 0) return 0.0;
  load_cost_->observe_prefill(n, ns);
  const double tps = static_cast<double>(n) * 1e9 / static_cast<double>(ns);
  logger_->info("kv load cost: prefill " + std::to_string(static_cast<int64_t>(tps)) + " tokens/s measured (" +
                std::to_string(n) + " tokens)");
  return tps;
}

int64_t Engine::load_from_tiers(kvcache::SeqId seq, std::span<const int32_t> prompt, const kvcache::KvNamespace& ns) {
  const int64_t bs = pool_->layout().block_size;
  const int64_t cached = blocks_->length(seq);
  const int64_t max_blocks = (static_cast<int64_t>(prompt.size()) - 1) / bs;
  if (cached / bs >= max_blocks) return 0;
  const kvcache::BlockHash parent =
      cached > 0 ? blocks_->index().hash(blocks_->block_table(seq)[static_cast<size_t>(cached / bs - 1)])
                 : kvcache::kRootBlockHash;
  const std::span<const int32_t> rest = prompt.subspan(static_cast<size_t>(cached), static_cast<size_t>(max_blocks * bs - cached));
  std::vector<kvcache::BlockHash> chain;
  kvcache::chain_hashes(blocks_->hash_fn(), parent, rest, bs, ns.key(), chain);
  const kvcache::ProbeId probe = tiers_->probe(chain);
  std::optional<std::vector<kvcache::TierRun>> runs;
  while (!(runs = tiers_->take_probe(probe))) {  // one request at a time: waiting is the point here
    sched_yield();
    tiers_->poll();
  }
  std::vector<std::string_view> media;
  for (int t = 0; t < tiers_->num_tiers(); ++t) media.push_back(tiers_->tier(t).medium());
  const int64_t n_load = load_cost_->decide(*runs, media, pool_->layout().bytes_per_block(), bs);
  if (n_load == 0 || !blocks_->begin_load(seq, rest.first(static_cast<size_t>(n_load * bs)))) return 0;
  const std::span<const int32_t> pool_blocks = blocks_->loading_blocks(seq);
  std::vector<kvcache::LoadItem> items;
  for (const kvcache::TierRun& r : *runs) {
    for (int64_t k = r.begin; k < r.begin + r.count && static_cast<int64_t>(items.size()) < n_load; ++k) {
      items.push_back({pool_blocks[items.size()], chain[static_cast<size_t>(k)], r.tier});
    }
  }
  const kvcache::LoadId load = tiers_->load(ns, items);
  std::optional<kvcache::LoadResult> result;
  while (!(result = tiers_->take_load(load))) {
    sched_yield();
    tiers_->poll();
  }
  const int64_t confirmed = blocks_->finish_load(seq, result->num_ok, result->tokens);
  for (int64_t i = 0; i < confirmed; ++i) {
    const kvcache::LoadItem& item = items[static_cast<size_t>(i)];
    note_loaded(item.block, item.tier, item.hash);
  }
  return confirmed * bs;
}

void Engine::note_loaded(int32_t block, int tier, uint64_t hash) {
  CHECK(tiers_ != nullptr && tier >= 0 && tier < tiers_->num_tiers()) << "note_loaded from tier " << tier;
  loaded_from_[static_cast<size_t>(block)] = LoadedFrom{static_cast<int8_t>(tier), hash};
}

int Engine::loaded_from(int32_t block, uint64_t hash) const {
  if (tiers_ == nullptr || block < 0 || static_cast<size_t>(block) >= loaded_from_.size()) return -1;
  const LoadedFrom& from = loaded_from_[static_cast<size_t>(block)];
  return from.tier >= 0 && from.hash == hash ? from.tier : -1;
}

}  // namespace pagoda::engine
