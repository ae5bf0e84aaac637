// Attention-score KV selection: victims and SnapKV keys (rules: kvcache/kv_select.h).
#include "kvcache/kv_select.h"

#include <algorithm>
#include <numeric>

#include "core/check.h"

namespace pagoda::kvcache {

std::string_view kv_select_method_name(KvSelectMethod method) {
  switch (method) {
    case KvSelectMethod::kOff: return "off";
    case KvSelectMethod::kH2O: return "h2o";
    case KvSelectMethod::kSnapKv: return "snapkv";
  }
  return "?";
}

std::optional<KvSelectMethod> kv_select_method_from_name(std::string_view name) {
  if (name == "off" || name.empty()) return KvSelectMethod::kOff;
  if (name == "h2o") return KvSelectMethod::kH2O;
  if (name == "snapkv") return KvSelectMethod::kSnapKv;
  return std::nullopt;
}

std::string KvSelectParams::describe() const {
  std::string s(kv_select_method_name(method));
  if (!on()) return s;
  s += " budget " + std::to_string(budget) + " recent " + std::to_string(recent);
  if (method == KvSelectMethod::kSnapKv) s += " observe " + std::to_string(observe);
  return s;
}

Status normalize_kv_select(KvSelectParams& p) {
  if (!p.on()) return Status::ok();
  if (p.budget < 2) return Status::invalid_argument("KV selection budget must be at least 2 tokens (got " + std::to_string(p.budget) + ")");
  if (p.recent < 0) return Status::invalid_argument("KV selection recent must be >= 0");
  if (p.observe < 0) return Status::invalid_argument("KV selection observe must be >= 0");
  if (p.method == KvSelectMethod::kSnapKv && p.observe == 0) p.observe = std::min<int64_t>(32, std::max<int64_t>(1, p.budget / 2));
  if (p.recent == 0) p.recent = p.method == KvSelectMethod::kSnapKv ? std::min(p.observe, p.budget / 2) : p.budget / 2;
  if (p.recent < 1 || p.recent >= p.budget) {
    return Status::invalid_argument("KV selection recent (" + std::to_string(p.recent) + ") must be in [1, budget " +
                                    std::to_string(p.budget) + ")");
  }
  if (p.method == KvSelectMethod::kH2O && p.observe != 0) return Status::invalid_argument("observe is for snapkv only");
  return Status::ok();
}

void choose_victims(std::span<const int32_t> positions, std::span<const float> scores, int64_t n_victims,
                    int64_t recent, std::vector<int64_t>& out) {
  CHECK_EQ(positions.size(), scores.size());
  out.clear();
  if (n_victims <= 0) return;
  const int64_t n = static_cast<int64_t>(positions.size());
  int32_t newest = -1;
  for (int32_t p : positions) newest = std::max(newest, p);
  // Rows are distinct positions <= newest: the recent ones are those above newest - recent.
  const int64_t recent_from = newest - recent + 1;
  for (int64_t i = 0; i < n; ++i) {
    if (positions[i] < recent_from) out.push_back(i);
  }
  CHECK_GE(static_cast<int64_t>(out.size()), n_victims) << "too few rows outside the recent ones to evict";
  std::nth_element(out.begin(), out.begin() + (n_victims - 1), out.end(), [&](int64_t a, int64_t b) {
    return scores[a] != scores[b] ? scores[a] < scores[b] : positions[a] < positions[b];
  });
  out.resize(static_cast<size_t>(n_victims));
  std::sort(out.begin(), out.end());
}

void snapkv_keys(std::span<const float> observed, int64_t n_heads, int64_t n_ctx, int64_t n_prefix, int64_t kernel,
                 std::span<float> keys_out) {
  CHECK_EQ(static_cast<int64_t>(observed.size()), n_heads * n_ctx);
  CHECK_GE(static_cast<int64_t>(keys_out.size()), n_ctx);
  CHECK(n_prefix >= 0 && n_prefix <= n_ctx);
  std::vector<int64_t> best_rank(static_cast<size_t>(n_prefix), n_prefix);
  std::vector<float> pooled(static_cast<size_t>(n_prefix));
  std::vector<int64_t> order(static_cast<size_t>(n_prefix));
  const int64_t half = kernel / 2;
  for (int64_t h = 0; h < n_heads; ++h) {
    const float* row = observed.data() + h * n_ctx;
    for (int64_t p = 0; p < n_prefix; ++p) {
      float m = row[p];
      for (int64_t q = std::max<int64_t>(0, p - half); q <= std::min(n_prefix - 1, p + half); ++q) m = std::max(m, row[q]);
      pooled[p] = m;
    }
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return pooled[a] > pooled[b]; });
    for (int64_t r = 0; r < n_prefix; ++r) best_rank[order[r]] = std::min(best_rank[order[r]], r);
  }
  for (int64_t p = 0; p < n_prefix; ++p) keys_out[p] = -static_cast<float>(best_rank[p]);
  for (int64_t p = n_prefix; p < n_ctx; ++p) keys_out[p] = 1.0f;
}

}  // namespace pagoda::kvcache
