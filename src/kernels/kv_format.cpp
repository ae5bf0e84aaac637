#include "kernels/kv_format.h"

#include "core/check.h"

namespace pagoda::kernels {

namespace {
constexpr std::string_view kDTypeNames[] = {"f32", "f16", "bf16", "fp8-e4m3", "fp8-e5m2", "int8", "int4"};
constexpr std::string_view kLayoutNames[] = {"nd", "nz"};

// Bytes of one (token, head) row, excluding per-block data.
int64_t row_bytes(KvDType dtype, int64_t hd, bool is_k) {
  switch (dtype) {
    case KvDType::kF32: return 4 * hd;
    case KvDType::kF16:
    case KvDType::kBF16: return 2 * hd;
    case KvDType::kFp8E4M3:
    case KvDType::kFp8E5M2:
    case KvDType::kInt8: return hd + 2;
    case KvDType::kInt4: return hd / 2 + (is_k ? 0 : 4);
  }
  return 0;
}
}  // namespace

std::string_view kv_dtype_name(KvDType dtype) { return kDTypeNames[static_cast<int>(dtype)]; }

std::optional<KvDType> kv_dtype_from_name(std::string_view name) {
  for (size_t i = 0; i < std::size(kDTypeNames); ++i) {
    if (kDTypeNames[i] == name) return static_cast<KvDType>(i);
  }
  return std::nullopt;
}

std::string_view kv_layout_name(KvLayoutKind layout) { return kLayoutNames[static_cast<int>(layout)]; }

std::optional<KvLayoutKind> kv_layout_from_name(std::string_view name) {
  for (size_t i = 0; i < std::size(kLayoutNames); ++i) {
    if (kLayoutNames[i] == name) return static_cast<KvLayoutKind>(i);
  }
  return std::nullopt;
}

bool kv_dtype_is_quantized(KvDType dtype) {
  return dtype != KvDType::kF32 && dtype != KvDType::kF16 && dtype != KvDType::kBF16;
}

int64_t kv_block_bytes_k(KvDType dtype, int64_t head_dim, int64_t block_size, int64_t n_kv_head) {
  CHECK(dtype != KvDType::kInt4 || head_dim % 2 == 0) << "int4 KV needs an even head_dim";
  int64_t bytes = block_size * row_bytes(dtype, head_dim, true);
  if (dtype == KvDType::kInt4) bytes += 4 * head_dim;  // per channel: f16 scale + f16 min
  return bytes * n_kv_head;
}

int64_t kv_block_bytes_v(KvDType dtype, int64_t head_dim, int64_t block_size, int64_t n_kv_head) {
  CHECK(dtype != KvDType::kInt4 || head_dim % 2 == 0) << "int4 KV needs an even head_dim";
  return block_size * row_bytes(dtype, head_dim, false) * n_kv_head;
}

}  // namespace pagoda::kernels
