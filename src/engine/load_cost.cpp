// LoadCostModel: the model is at the top of engine/load_cost.h.
#include "engine/load_cost.h"

#include <algorithm>
#include <cstdio>
#include <string>

namespace pagoda::engine {

namespace {

constexpr double kWeight = 0.2;  // of a new measurement in the running estimates

double prior_bandwidth(std::string_view medium) {
  if (medium == "CPU") return 10e9;
  if (medium == "DISK") return 2e9;
  return 1e9;
}

double prior_latency(std::string_view medium) {
  if (medium == "CPU") return 20e-6;
  return 1e-3;
}

std::string fmt(const char* format, double a, double b = 0) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), format, a, b);
  return buf;
}

}  // namespace

LoadCostModel::TierEstimate& LoadCostModel::at(int tier) {
  if (static_cast<size_t>(tier) >= tiers_.size()) tiers_.resize(static_cast<size_t>(tier) + 1);
  return tiers_[static_cast<size_t>(tier)];
}

double LoadCostModel::bandwidth(int tier, std::string_view medium) const {
  const size_t t = static_cast<size_t>(tier);
  // A get's latency runs until the step loop polls it, so a long forward pass inflates it: the
  // estimate never falls below an eighth of the medium's prior.
  if (t < tiers_.size() && tiers_[t].bandwidth > 0) return std::max(tiers_[t].bandwidth, prior_bandwidth(medium) / 8);
  return prior_bandwidth(medium);
}

double LoadCostModel::latency_s(int tier, std::string_view medium) const {
  const size_t t = static_cast<size_t>(tier);
  if (t < tiers_.size() && tiers_[t].bandwidth > 0) return tiers_[t].latency_s;
  return prior_latency(medium);
}

void LoadCostModel::observe_load(int tier, std::string_view medium, int64_t bytes, int64_t ns) {
  if (bytes <= 0) return;
  TierEstimate& e = at(tier);
  const double seconds = std::max<double>(static_cast<double>(ns) * 1e-9, 1e-7);
  const double bw = static_cast<double>(bytes) / seconds;
  if (e.bandwidth <= 0) {
    e.bandwidth = bw;
    e.latency_s = prior_latency(medium) / 10;  // measured gets include their latency already
  } else {
    e.bandwidth = (1 - kWeight) * e.bandwidth + kWeight * bw;
  }
}

void LoadCostModel::observe_prefill(int64_t tokens, int64_t ns) {
  if (tokens <= 0 || ns <= 0) return;
  const double tps = static_cast<double>(tokens) / (static_cast<double>(ns) * 1e-9);
  prefill_tps_ = prefill_measured_ ? (1 - kWeight) * prefill_tps_ + kWeight * tps : tps;
  prefill_measured_ = true;
}

int64_t LoadCostModel::decide(std::span<const kvcache::TierRun> runs, std::span<const std::string_view> tier_media,
                              int64_t bytes_per_block, int64_t block_size) {
  int64_t total = 0;
  for (const kvcache::TierRun& r : runs) total += r.count;
  if (total == 0) return 0;
  int64_t best = 0;
  if (mode_ == Mode::kAlwaysLoad) {
    best = total;
  } else if (mode_ == Mode::kAuto) {
    const double per_token = 1.0 / prefill_tps_;
    const double recompute_all = static_cast<double>(total * block_size) * per_token;
    double best_cost = recompute_all;  // load nothing
    double load_cost = 0;
    int64_t loaded = 0;
    std::string runs_text;
    for (const kvcache::TierRun& r : runs) {
      const std::string_view medium = static_cast<size_t>(r.tier) < tier_media.size() ? tier_media[static_cast<size_t>(r.tier)] : "";
      load_cost += static_cast<double>(r.count * bytes_per_block) / bandwidth(r.tier, medium) + latency_s(r.tier, medium);
      loaded += r.count;
      const double cost = load_cost + static_cast<double>((total - loaded) * block_size) * per_token;
      if (cost < best_cost) {
        best_cost = cost;
        best = loaded;
      }
      if (logger_ != nullptr && logger_->level() <= LogLevel::kDebug) {
        const bool measured = static_cast<size_t>(r.tier) < tiers_.size() && tiers_[static_cast<size_t>(r.tier)].bandwidth > 0;
        runs_text += " " + std::to_string(r.count) + " from tier " + std::to_string(r.tier) + " (" + std::string(medium) +
                     fmt(" %.0f MB/s", bandwidth(r.tier, medium) / 1e6) + (measured ? " measured)" : " prior)");
      }
    }
    if (logger_ != nullptr && logger_->level() <= LogLevel::kDebug) {
      logger_->debug("kv load decision: " + std::to_string(total) + " blocks in tiers:" + runs_text + "; load all" +
                     fmt(" %.3f s, recompute all %.3f s", load_cost, recompute_all) +
                     fmt(" at %.0f tokens/s", prefill_tps_) + (prefill_measured_ ? " measured" : " prior") +
                     "; loads " + std::to_string(best) + " blocks");
    }
  }
  if (best > 0) ++stats_.load;
  if (best < total) ++stats_.recompute;
  return best;
}

}  // namespace pagoda::engine
