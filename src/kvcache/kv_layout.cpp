#include "kvcache/kv_layout.h"

#include <cctype>
#include <cmath>
#include <cstdio>

namespace pagoda::kvcache {

int64_t KvLayout::elem_bytes() const {
  const DTypeInfo& info = dtype_info(dtype);
  CHECK_EQ(info.block_elems, 1) << "KV dtype " << info.name << " is not a plain type";
  return info.block_bytes;
}

Status KvLayout::validate() const {
  if (n_layer <= 0 || n_kv_head <= 0 || head_dim <= 0) {
    return Status::error("KV layout needs positive n_layer, n_kv_head and head_dim");
  }
  if (block_size <= 0 || block_size > 4096) {
    return Status::error("block size must be in [1, 4096], got " + std::to_string(block_size));
  }
  if (dtype != DType::kF32 && dtype != DType::kF16) {
    return Status::error("KV dtype " + std::string(dtype_name(dtype)) + " is not supported (use f32 or f16)");
  }
  return Status::ok();
}

Result<KvPoolPlan> plan_kv_pool(const KvLayout& layout, int64_t budget_bytes, int64_t min_blocks) {
  PAGODA_RETURN_IF_ERROR(layout.validate());
  KvPoolPlan plan;
  plan.num_blocks = budget_bytes / layout.bytes_per_block();
  if (plan.num_blocks < min_blocks) {
    return Status::error("KV cache budget " + format_bytes(budget_bytes) + " holds " +
                         std::to_string(plan.num_blocks) + " blocks of " +
                         format_bytes(layout.bytes_per_block()) + "; at least " +
                         std::to_string(min_blocks) + " needed");
  }
  plan.pool_bytes = plan.num_blocks * layout.bytes_per_block();
  plan.token_capacity = plan.num_blocks * layout.block_size;
  return plan;
}

std::string describe_kv_pool(const KvLayout& layout, const KvPoolPlan& plan) {
  char buf[512];
  std::snprintf(buf, sizeof(buf),
                "KV cache: %s, %lld B/token (2 x %lld layers x %lld kv heads x %lld dims x %lld B), "
                "block %lld tokens = %s, %lld blocks = %s, capacity %lld tokens",
                std::string(dtype_name(layout.dtype)).c_str(), (long long)layout.bytes_per_token(),
                (long long)layout.n_layer, (long long)layout.n_kv_head, (long long)layout.head_dim,
                (long long)layout.elem_bytes(), (long long)layout.block_size,
                format_bytes(layout.bytes_per_block()).c_str(), (long long)plan.num_blocks,
                format_bytes(plan.pool_bytes).c_str(), (long long)plan.token_capacity);
  return buf;
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
