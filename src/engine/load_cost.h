// LoadCostModel: per request, is loading a prefix's blocks from the tiers faster than
// recomputing them? (No anchor decides this; issue 9 asks for it.)
//
//   load time of k blocks from tier t  = k x bytes_per_block / bandwidth(t) + latency(t)
//   recompute time of n tokens         = n / prefill_tokens_per_second
// The candidates are every prefix of the tier runs a probe found, cut at run boundaries (load
// the host part, recompute what only the disk holds, ...); the choice minimises load time of the
// prefix + recompute time of the rest. Estimates are measured: each completed get feeds its
// tier's bandwidth (bytes / get latency, an exponentially weighted mean), each prefill step the
// prefill speed (tokens / forward-pass seconds). The first decision already uses this machine's
// figures: at start-up the engine times a short prefill (Engine::calibrate_load_cost) and each
// tier's probe moves a block-sized payload (Tier::take_transfer_sample), both fed in as
// measurements. Priors remain only for what could not be timed, and they lean toward loading
// (a wrong load costs some bandwidth, a wrong recompute seconds of TTFT): host 10 GB/s, disk
// 2 GB/s, anything else 1 GB/s, plus 20 us / 1 ms / 1 ms latency; prefill 500 tokens/s. A
// measured get lasts until the step loop polls it, so a measured bandwidth is never taken below
// 1/8 of the medium's prior. Decisions are counted, and logged at debug level (`-v`) with their
// estimates.
//
// Not thread-safe: the scheduler's thread owns it.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "core/log.h"
#include "kvcache/tier_stack.h"

namespace pagoda::engine {

struct LoadDecisionStats {
  int64_t load = 0;       // requests that loaded blocks from a tier
  int64_t recompute = 0;  // requests whose tier hits were recomputed instead (all or a part)
};

class LoadCostModel {
 public:
  // force: "auto" (the model decides), "load" (always load), "recompute" (never load).
  enum class Mode : uint8_t { kAuto, kAlwaysLoad, kNeverLoad };
  explicit LoadCostModel(Mode mode = Mode::kAuto) : mode_(mode) {}
  // Where decide() logs each decision at debug level (nullptr: nowhere). Not owned.
  void set_logger(const Logger* logger) { logger_ = logger; }

  // Blocks to load of `runs` (consecutive from the first): a prefix ending at a run boundary.
  int64_t decide(std::span<const kvcache::TierRun> runs, std::span<const std::string_view> tier_media,
                 int64_t bytes_per_block, int64_t block_size);
  void observe_load(int tier, std::string_view medium, int64_t bytes, int64_t ns);
  void observe_prefill(int64_t tokens, int64_t ns);

  double bandwidth(int tier, std::string_view medium) const;  // bytes / s
  double latency_s(int tier, std::string_view medium) const;
  double prefill_tokens_per_s() const { return prefill_tps_; }
  const LoadDecisionStats& stats() const { return stats_; }

 private:
  struct TierEstimate {
    double bandwidth = 0;  // 0: not measured yet
    double latency_s = 0;
  };
  TierEstimate& at(int tier);

  Mode mode_;
  std::vector<TierEstimate> tiers_;
  double prefill_tps_ = 500;
  bool prefill_measured_ = false;
  const Logger* logger_ = nullptr;
  LoadDecisionStats stats_;
};

}  // namespace pagoda::engine
