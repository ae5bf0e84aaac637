#include "kvcache/kv_layout.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>

#include "kernels/kv_store.h"

namespace pagoda::kvcache {

int64_t KvLayout::k_block_bytes() const {
  return kernels::kv_block_bytes_k(dtype, head_dim, block_size, n_kv_head);
}

int64_t KvLayout::v_block_bytes() const {
  if (k_only) return 0;
  return kernels::kv_block_bytes_v(dtype, head_dim, block_size, n_kv_head);
}

int64_t KvLayout::layer_array_bytes(int64_t num_blocks) const {
  CHECK_EQ(k_block_bytes(), v_block_bytes()) << "K and V blocks differ in size for KV dtype " << kernels::kv_dtype_name(dtype);
  return k_array_bytes(num_blocks);
}

int64_t KvLayout::layer_stage_bytes() const {
  return kernels::kv_stage_bytes(dtype, block_size, n_kv_head, head_dim, stage_slots);
}

Status KvLayout::validate() const {
  using kernels::KvDType;
  if (n_layer <= 0 || n_kv_head <= 0 || head_dim <= 0) {
    return Status::error("KV layout needs positive n_layer, n_kv_head and head_dim");
  }
  if (block_size <= 0 || block_size > 4096) {
    return Status::error("block size must be in [1, 4096], got " + std::to_string(block_size));
  }
  const std::string dtype_name(kernels::kv_dtype_name(dtype));
  if (dtype == KvDType::kInt4) {
    if (head_dim % 2 != 0) {
      return Status::error("KV dtype int4 needs an even head dim, the model has " + std::to_string(head_dim));
    }
    if (stage_slots < 1 || stage_slots > 4096) {
      return Status::error("KV dtype int4 needs 1..4096 stage slots, got " + std::to_string(stage_slots));
    }
  }
  if (layout == kernels::KvLayoutKind::kNZ) {
    if (kernels::kv_dtype_is_quantized(dtype)) {
      return Status::error("KV layout nz stores unquantized elements only (f32, f16, bf16), not " + dtype_name);
    }
    if (block_size % 16 != 0) {
      return Status::error("KV layout nz needs a block size that is a multiple of 16, got " + std::to_string(block_size));
    }
    if (n_kv_head * head_dim % 16 != 0) {
      return Status::error("KV layout nz needs n_kv_head x head_dim to be a multiple of 16, the model has " +
                           std::to_string(n_kv_head) + " x " + std::to_string(head_dim));
    }
  }
  return Status::ok();
}

Result<KvPoolPlan> plan_kv_pool(const KvLayout& layout, int64_t budget_bytes, int64_t min_blocks) {
  PAGODA_RETURN_IF_ERROR(layout.validate());
  KvPoolPlan plan;
  const int64_t stage = layout.stage_bytes();
  plan.num_blocks = std::max<int64_t>(0, budget_bytes - stage) / layout.bytes_per_block();
  if (plan.num_blocks < min_blocks) {
    return Status::error("KV cache budget " + format_bytes(budget_bytes) + " holds " +
                         std::to_string(plan.num_blocks) + " blocks of " +
                         format_bytes(layout.bytes_per_block()) +
                         (stage > 0 ? " (after " + format_bytes(stage) + " of int4 staging)" : std::string()) +
                         "; at least " + std::to_string(min_blocks) + " needed");
  }
  plan.pool_bytes = plan.num_blocks * layout.bytes_per_block() + stage;
  plan.token_capacity = plan.num_blocks * layout.block_size;
  return plan;
}

std::string describe_kv_pool(const KvLayout& layout, const KvPoolPlan& plan) {
  const double k_per_token = static_cast<double>(layout.k_block_bytes()) / (layout.block_size * layout.n_kv_head);
  const double v_per_token = static_cast<double>(layout.v_block_bytes()) / (layout.block_size * layout.n_kv_head);
  char buf[640];
  std::snprintf(buf, sizeof(buf),
                "KV cache in host DRAM: %s %s, %lld B/token (%lld layers x %lld kv heads x (K %g + V %g B), head dim %lld), "
                "block %lld tokens = %s, %lld blocks = %s, capacity %lld tokens",
                std::string(kernels::kv_dtype_name(layout.dtype)).c_str(),
                std::string(kernels::kv_layout_name(layout.layout)).c_str(), (long long)layout.bytes_per_token(),
                (long long)layout.n_layer, (long long)layout.n_kv_head, k_per_token, v_per_token,
                (long long)layout.head_dim, (long long)layout.block_size,
                format_bytes(layout.bytes_per_block()).c_str(), (long long)plan.num_blocks,
                format_bytes(plan.pool_bytes).c_str(), (long long)plan.token_capacity);
  std::string line = buf;
  if (layout.k_only) line += " (MLA latent cache: K rows only)";
  if (layout.stage_bytes() > 0) {
    line += " (incl. int4 K staging: " + std::to_string(layout.stage_slots) + " partial blocks x " +
            std::to_string(layout.n_layer) + " layers in f32 = " + format_bytes(layout.stage_bytes()) + ")";
  }
  return line;
}

std::string format_bytes(int64_t bytes) {
  static constexpr const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double value = static_cast<double>(bytes);
  int unit = 0;
  while (std::fabs(value) >= 1024.0 && unit < 4) {
    value /= 1024.0;
    ++unit;
  }
  char buf[64];
  if (unit == 0) {
    std::snprintf(buf, sizeof(buf), "%lld B", static_cast<long long>(bytes));
  } else {
    std::snprintf(buf, sizeof(buf), "%.1f %s", value, kUnits[unit]);
  }
  return buf;
}

Result<int64_t> parse_bytes(const std::string& text) {
  size_t i = 0;
  while (i < text.size() && (std::isdigit(static_cast<unsigned char>(text[i])) || text[i] == '.')) ++i;
  if (i == 0) return Status::error("not a byte size: '" + text + "' (examples: 512M, 2G, 1048576)");
  double value = std::stod(text.substr(0, i));
  std::string unit = text.substr(i);
  for (char& c : unit) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  double mult = 1;
  if (unit.empty() || unit == "B") mult = 1;
  else if (unit == "K" || unit == "KB" || unit == "KIB") mult = 1024.0;
  else if (unit == "M" || unit == "MB" || unit == "MIB") mult = 1024.0 * 1024;
  else if (unit == "G" || unit == "GB" || unit == "GIB") mult = 1024.0 * 1024 * 1024;
  else if (unit == "T" || unit == "TB" || unit == "TIB") mult = 1024.0 * 1024 * 1024 * 1024;
  else return Status::error("unknown byte unit '" + text.substr(i) + "' in '" + text + "'");
  double bytes = value * mult;
  if (!(bytes >= 0) || bytes > 9e18) return Status::error("byte size out of range: '" + text + "'");
  return static_cast<int64_t>(bytes);
}

}  // namespace pagoda::kvcache
