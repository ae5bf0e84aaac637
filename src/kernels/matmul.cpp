// Matmul: references, ISA detection, the scalar kernel table and the decode/prefill drivers.
#include "kernels/matmul.h"

#include <cblas.h>
#include <cpuid.h>

#include <algorithm>
#include <array>
#include <cmath>
#if defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#endif

#include "core/check.h"
#include "kernels/matmul_amx.h"
#include "kernels/matmul_bf16.h"
#include "kernels/matmul_f32.h"
#include "kernels/matmul_int8.h"
#include "kernels/matmul_isa.h"
#include "kernels/quant.h"

namespace pagoda::kernels {

namespace {

// Integer dot of one Q8_0 block of x with a weight block; the weight quant of value j is
// given by `wq(j)`.
template <typename WeightQuant>
int32_t block_dot(const int8_t* xq, WeightQuant wq) {
  int32_t sum = 0;
  for (int j = 0; j < kQK; ++j) sum += wq(j) * static_cast<int32_t>(xq[j]);
  return sum;
}

// The decode arithmetic for one weight row and one token of Q8_0 x (split as DecodeX):
//   sum over blocks of (float)(integer block dot) * (d_w * d_x), accumulated in float.
float dot_row_quantized(DType dtype, const uint8_t* w_row, const int8_t* xq, const float* xd,
                        int64_t x_lane_stride, int64_t n_in) {
  float sum = 0.0f;
  for (int64_t b = 0; b < n_in / kQK; ++b) {
    int32_t sumi = 0;
    float dw = 0.0f;
    if (dtype == DType::kQ8_0) {
      const auto& blk = reinterpret_cast<const BlockQ8_0*>(w_row)[b];
      sumi = block_dot(xq + b * kQK, [&](int j) { return static_cast<int32_t>(blk.qs[j]); });
      dw = fp16_to_fp32(blk.d);
    } else {
      const auto& blk = reinterpret_cast<const BlockQ4_0*>(w_row)[b];
      sumi = block_dot(xq + b * kQK, [&](int j) {
        const uint8_t byte = blk.qs[j % (kQK / 2)];
        return static_cast<int32_t>(j < kQK / 2 ? (byte & 15) : (byte >> 4)) - 8;
      });
      dw = fp16_to_fp32(blk.d);
    }
    sum += static_cast<float>(sumi) * (dw * xd[b * x_lane_stride]);
  }
  return sum;
}

float dot_row_float(DType dtype, const uint8_t* w_row, const float* x, int64_t n_in) {
  float sum = 0.0f;
  const auto* h = reinterpret_cast<const uint16_t*>(w_row);
  const auto* f = reinterpret_cast<const float*>(w_row);
  for (int64_t i = 0; i < n_in; ++i) {
    const float wv = dtype == DType::kF32 ? f[i] : dtype == DType::kF16 ? fp16_to_fp32(h[i]) : bf16_to_fp32(h[i]);
    sum += wv * x[i];
  }
  return sum;
}

bool is_quantized(DType dtype) { return dtype == DType::kQ8_0 || dtype == DType::kQ4_0; }  // x as Q8_0

// ---- the scalar kernel table ----

void quantize_x_scalar(const float* x, int64_t n, int8_t* qs, float* d, float* ds, int64_t lane_stride) {
  for (int64_t b = 0; b < n / kQK; ++b) {
    BlockQ8_0 blk;
    quantize_row(DType::kQ8_0, x + b * kQK, &blk, kQK);
    int32_t sum = 0;
    for (int j = 0; j < kQK; ++j) {
      qs[b * kQK + j] = blk.qs[j];
      sum += blk.qs[j];
    }
    d[b * lane_stride] = fp16_to_fp32(blk.d);
    ds[b * lane_stride] = d[b * lane_stride] * static_cast<float>(sum);
  }
}

void decode_rows_scalar(const WeightView& w, const detail::DecodeX& x, int64_t o_begin, int64_t o_end,
                        float* y, int64_t ldy) {
  if (is_kquant(w.dtype)) {
    const int64_t nb = w.n_in / kQK_K;
    for (int64_t o = o_begin; o < o_end; ++o)
      for (int64_t t = 0; t < x.n_tokens; ++t) y[t * ldy + o] = dot_kquant_q8k(w.dtype, w.row(o), x.q8k + t * nb, w.n_in);
    return;
  }
  for (int64_t o = o_begin; o < o_end; ++o) {
    for (int64_t t = 0; t < x.n_tokens; ++t) {
      y[t * ldy + o] = is_quantized(w.dtype)
                           ? dot_row_quantized(w.dtype, w.row(o), x.qs + t * x.n_in, x.d + t,
                                               detail::kDecodeLanes, w.n_in)
                           : dot_row_float(w.dtype, w.row(o), x.f32 + t * x.n_in, w.n_in);
    }
  }
}

size_t no_extra_bytes(int64_t, int64_t) { return 0; }

void dequantize_rows_scalar(const WeightView& w, int64_t o_begin, int64_t n_rows, float* dst) {
  for (int64_t r = 0; r < n_rows; ++r) dequantize_row(w.dtype, w.row(o_begin + r), dst + r * w.n_in, w.n_in);
}

}  // namespace

namespace detail {

const MatmulKernels& matmul_kernels_scalar() {
  static constexpr MatmulKernels kTable = {quantize_x_scalar, no_extra_bytes, nullptr, decode_rows_scalar,
                                           dequantize_rows_scalar};
  return kTable;
}

const MatmulKernels& matmul_kernels(Isa isa) {
  switch (isa) {
    case Isa::kScalar:
      return matmul_kernels_scalar();
    case Isa::kAvx2:
      return matmul_kernels_avx2();
    case Isa::kAvx512:
    case Isa::kAmx:
      return matmul_kernels_avx512();
  }
  CHECK(false) << "unknown isa " << static_cast<int>(isa);
  return matmul_kernels_scalar();
}

}  // namespace detail

// ---- references ----

void matmul_reference(const WeightView& w, const float* x, int64_t n_tokens, float* y) {
  std::vector<float> row(static_cast<size_t>(w.n_in));
  for (int64_t o = 0; o < w.n_out; ++o) {
    dequantize_row(w.dtype, w.row(o), row.data(), w.n_in);
    for (int64_t t = 0; t < n_tokens; ++t) {
      double sum = 0.0;
      for (int64_t i = 0; i < w.n_in; ++i) sum += static_cast<double>(row[i]) * x[t * w.n_in + i];
      y[t * w.n_out + o] = static_cast<float>(sum);
    }
  }
}

void matmul_decode_reference(const WeightView& w, const float* x, int64_t n_tokens, float* y) {
  if (is_kquant(w.dtype)) {
    std::vector<BlockQ8_K> xq(static_cast<size_t>(w.n_in / kQK_K));
    for (int64_t t = 0; t < n_tokens; ++t) {
      quantize_row_q8_k(x + t * w.n_in, xq.data(), w.n_in);
      for (int64_t o = 0; o < w.n_out; ++o) y[t * w.n_out + o] = dot_kquant_q8k(w.dtype, w.row(o), xq.data(), w.n_in);
    }
    return;
  }
  const int64_t nb = w.n_in / kQK;
  std::vector<float> row(static_cast<size_t>(w.n_in));
  std::vector<BlockQ8_0> xq(static_cast<size_t>(is_quantized(w.dtype) ? nb : 0));
  std::vector<int8_t> xqs(xq.size() * kQK);
  std::vector<float> xd(xq.size());
  for (int64_t t = 0; t < n_tokens; ++t) {
    const float* xt = x + t * w.n_in;
    if (is_quantized(w.dtype)) {
      quantize_row(DType::kQ8_0, xt, xq.data(), w.n_in);
      for (int64_t b = 0; b < nb; ++b) {
        std::copy(xq[b].qs, xq[b].qs + kQK, xqs.begin() + b * kQK);
        xd[b] = fp16_to_fp32(xq[b].d);
      }
    }
    for (int64_t o = 0; o < w.n_out; ++o) {
      if (is_quantized(w.dtype)) {
        y[t * w.n_out + o] = dot_row_quantized(w.dtype, w.row(o), xqs.data(), xd.data(), 1, w.n_in);
      } else {
        dequantize_row(w.dtype, w.row(o), row.data(), w.n_in);
        float sum = 0.0f;
        for (int64_t i = 0; i < w.n_in; ++i) sum += row[i] * xt[i];
        y[t * w.n_out + o] = sum;
      }
    }
  }
}

void matmul_bf16_reference(const WeightView& w, const float* x, int64_t n_tokens, float* y) {
  std::vector<float> row(static_cast<size_t>(w.n_in));
  for (int64_t o = 0; o < w.n_out; ++o) {
    dequantize_row(w.dtype, w.row(o), row.data(), w.n_in);
    for (auto& v : row) v = bf16_to_fp32(fp32_to_bf16(v));
    for (int64_t t = 0; t < n_tokens; ++t) {
      double sum = 0.0;
      for (int64_t i = 0; i < w.n_in; ++i) {
        sum += static_cast<double>(row[i]) * bf16_to_fp32(fp32_to_bf16(x[t * w.n_in + i]));
      }
      y[t * w.n_out + o] = static_cast<float>(sum);
    }
  }
}

// ---- ISA ----

// F16C (CPUID.1:ECX bit 29): clang 14's __builtin_cpu_supports does not know "f16c".
static bool cpu_has_f16c() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  return __get_cpuid(1, &a, &b, &c, &d) != 0 && (c & bit_F16C) != 0;
}

Isa detect_isa() {
  __builtin_cpu_init();
  // Exactly the -m flags each kernel file is compiled with (src/kernels/CMakeLists.txt).
  const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && cpu_has_f16c();
  const bool avx512 = avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
                      __builtin_cpu_supports("avx512vnni");
  if (avx512 && detail::amx_usable()) return Isa::kAmx;
  if (avx512) return Isa::kAvx512;
  if (avx2) return Isa::kAvx2;
  return Isa::kScalar;
}

std::optional<Isa> isa_from_name(std::string_view name) {
  for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512, Isa::kAmx}) {
    if (name == isa_name(isa)) return isa;
  }
  return std::nullopt;
}

std::vector<Isa> supported_isas() {
  std::vector<Isa> isas;
  for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512, Isa::kAmx}) {
    if (isa <= detect_isa()) isas.push_back(isa);
  }
  return isas;
}

bool batched_bf16_runs(Isa isa) { return isa == Isa::kAvx512 && isa <= detect_isa() && detail::bf16_usable(); }

const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::kScalar:
      return "scalar";
    case Isa::kAvx2:
      return "avx2";
    case Isa::kAvx512:
      return "avx512";
    case Isa::kAmx:
      return "amx";
  }
  return "unknown";
}

namespace detail {

// CPUID.(EAX=7, ECX=0):EDX bits 22 (AMX-BF16) and 24 (AMX-TILE), EAX=7/ECX=1:EAX bit 5
// (AVX512-BF16); then the kernel's permission for tile data (Linux >= 5.16), asked once.
bool amx_usable() {
  static const bool usable = [] {
#if defined(__x86_64__) && defined(__linux__)
    unsigned a, b, c, d;
    __asm__ volatile("cpuid" : "=a"(a), "=b"(b), "=c"(c), "=d"(d) : "a"(7), "c"(0));
    if (a < 1 || !(d & (1u << 22)) || !(d & (1u << 24))) return false;
    __asm__ volatile("cpuid" : "=a"(a), "=b"(b), "=c"(c), "=d"(d) : "a"(7), "c"(1));
    if (!(a & (1u << 5))) return false;
    constexpr long kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
    return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
#else
    return false;
#endif
  }();
  return usable;
}

bool bf16_usable() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512bf16");
}

}  // namespace detail

// ---- Matmul ----

Matmul::Matmul(ThreadPool& pool, int64_t max_tokens, int64_t max_in, int64_t max_out, Isa isa)
    : pool_(pool), isa_(isa), max_tokens_(max_tokens), max_in_(max_in), max_out_(max_out) {
  CHECK_GE(max_tokens, 1);
  CHECK_GE(max_in, 1);
  CHECK_GE(max_out, 1);
  CHECK_LE(static_cast<int>(isa), static_cast<int>(detect_isa())) << "ISA " << isa_name(isa) << " not supported here";
  const int64_t decode_tokens = std::min(max_tokens, kDecodeMaxTokens);
  decode_groups_ = (decode_tokens + kDecodeGroupTokens - 1) / kDecodeGroupTokens;
  const int64_t group_tokens = std::min(decode_tokens, kDecodeGroupTokens);
  const int64_t max_blocks = (max_in + kQK - 1) / kQK;
  x_qs_.resize(static_cast<size_t>(decode_tokens * max_blocks * kQK));
  x_d_.resize(static_cast<size_t>(decode_groups_ * max_blocks * detail::kDecodeLanes));
  x_ds_.resize(x_d_.size());
  extra_stride_ = (detail::matmul_kernels(isa).extra_bytes(group_tokens, max_blocks * kQK) + 63) / 64 * 64;
  x_extra_.resize(static_cast<size_t>(decode_groups_) * extra_stride_ + 64);
  x_q8k_.resize(static_cast<size_t>(decode_tokens * (max_in / kQK_K)));
  if (max_tokens >= kBlasMinTokens) {
    w_scratch_.resize(static_cast<size_t>(pool.num_threads()));
    for (auto& scratch : w_scratch_) scratch.resize(static_cast<size_t>(kBlasRowChunk * max_in));
    openblas_set_num_threads(1);
    amx_ = isa == Isa::kAmx && max_in % 32 == 0;
    if (amx_) {
      const size_t x_elems = static_cast<size_t>(detail::amx_pad32(max_tokens) * max_in);
      x_hi_.resize(x_elems);
      x_lo_.resize(x_elems);
      w_packed_.resize(static_cast<size_t>(pool.num_threads()));
      for (auto& p : w_packed_) p.resize(static_cast<size_t>(2 * detail::kAmxRowChunk * max_in));
      c_scratch_.resize(static_cast<size_t>(pool.num_threads()));
      for (auto& c : c_scratch_) c.resize(32 * 32 + 16);
    }
    if (isa >= Isa::kAvx2 && !amx_ && max_in % kQK == 0) {  // resize runs AVX2 code: only here
      int8_ = std::make_unique<detail::Int8Scratch>();
      int8_->x.resize(max_tokens, max_in);
      int8_->w.resize(static_cast<size_t>(pool.num_threads()));
      for (auto& w : int8_->w) w.resize(max_in);
    }
    if (batched_bf16_runs(isa) && max_in % 2 == 0) {
      bf16_ = std::make_unique<detail::Bf16Scratch>();
      bf16_->x.resize(static_cast<size_t>(detail::panel_pad_tokens(max_tokens) * max_in + 32));
      bf16_->w.resize(static_cast<size_t>(pool.num_threads()));
      for (auto& w : bf16_->w) w.resize(static_cast<size_t>(detail::kBf16RowChunk * max_in));
    }
  }
  if (isa >= Isa::kAvx2 && max_tokens >= kF32MinTokens) {
    f32_ = std::make_unique<detail::F32Scratch>();
    const int64_t tokens = detail::panel_pad_tokens(std::min(max_tokens, kDecodeMaxTokens));
    f32_->x.resize(static_cast<size_t>(tokens * max_in + 16));
    f32_->w.resize(static_cast<size_t>(pool.num_threads()));
    for (auto& w : f32_->w) w.resize(static_cast<size_t>(detail::kF32ChunkFloats + 16 + 2 * detail::kF32ChunkGuard));
  }
}

Matmul::~Matmul() = default;

bool Matmul::uses_bf16(const WeightView& w) const {
  return !f32_precision_ && bf16_ != nullptr && half_weights(w.dtype) && !uses_amx(w);
}

bool Matmul::uses_f32(const WeightView& w) const { return f32_gemm_ && f32_ != nullptr && detail::f32_gemm_weights(w); }

bool Matmul::uses_int8(const WeightView& w) const {
  return int8_gemm_ && int8_ != nullptr && detail::int8_gemm_dtype(w.dtype) && !uses_amx(w);
}

void Matmul::run(const WeightView& w, const float* x, int64_t n_tokens, float* y) {
  CHECK(n_tokens >= 1 && n_tokens <= max_tokens_) << n_tokens << " tokens, max " << max_tokens_;
  CHECK(w.n_in <= max_in_ && w.n_out <= max_out_)
      << "weight [" << w.n_out << ", " << w.n_in << "] over [" << max_out_ << ", " << max_in_ << "]";
  CHECK_EQ(w.n_in % dtype_info(w.dtype).block_elems, 0);
  switch (path(w, n_tokens)) {
    case Path::kDecode:
      run_decode(w, x, n_tokens, y);
      return;
    case Path::kAmx:
      run_prefill_amx(w, x, n_tokens, y);
      return;
    case Path::kInt8:
      run_prefill_int8(w, x, n_tokens, y);
      return;
    case Path::kBf16:
      run_prefill_bf16(w, x, n_tokens, y);
      return;
    case Path::kF32:
      run_f32(w, x, n_tokens, y);
      return;
    case Path::kSgemm:
      run_prefill(w, x, n_tokens, y);
      return;
  }
}

Matmul::Path Matmul::path(const WeightView& w, int64_t n_tokens) const {
  if (uses_decode_kernels(w.dtype, n_tokens)) {
    if (n_tokens >= int8_min_tokens(w.dtype) && uses_int8(w)) return Path::kInt8;
    if (batched_bf16_ && n_tokens >= kBf16MinTokens && uses_bf16(w)) return Path::kBf16;
    if (n_tokens >= kF32MinTokens && uses_f32(w)) return Path::kF32;
    return Path::kDecode;
  }
  if (uses_amx(w)) return Path::kAmx;
  if (uses_int8(w)) return Path::kInt8;
  if (uses_bf16(w)) return Path::kBf16;
  return Path::kSgemm;
}

void Matmul::run_decode(const WeightView& w, const float* x, int64_t n_tokens, float* y) {
  const detail::MatmulKernels& kernels = detail::matmul_kernels(isa_);
  const int64_t n_groups = (n_tokens + kDecodeGroupTokens - 1) / kDecodeGroupTokens;
  CHECK_LE(n_groups, decode_groups_);
  const int64_t n_blocks = w.n_in / kQK;
  uint8_t* extra_base = x_extra_.data() + (64 - reinterpret_cast<uintptr_t>(x_extra_.data()) % 64) % 64;
  std::array<detail::DecodeX, kDecodeMaxGroups> groups;  // the kernels' view of each token group
  for (int64_t g = 0; g < n_groups; ++g) {
    const int64_t t0 = g * kDecodeGroupTokens;
    detail::DecodeX& dx = groups[static_cast<size_t>(g)];
    dx.n_tokens = std::min(kDecodeGroupTokens, n_tokens - t0);
    dx.n_in = w.n_in;
    const float* xg = x + t0 * w.n_in;
    if (is_kquant(w.dtype)) {
      const int64_t nb = w.n_in / kQK_K;
      BlockQ8_K* q8k = x_q8k_.data() + t0 * nb;
      for (int64_t t = 0; t < dx.n_tokens; ++t) quantize_row_q8_k(xg + t * w.n_in, q8k + t * nb, w.n_in);
      dx.q8k = q8k;
    } else if (is_quantized(w.dtype)) {
      int8_t* qs = x_qs_.data() + t0 * w.n_in;
      float* d = x_d_.data() + g * n_blocks * detail::kDecodeLanes;
      float* ds = x_ds_.data() + g * n_blocks * detail::kDecodeLanes;
      for (int64_t t = 0; t < dx.n_tokens; ++t) {
        kernels.quantize_x(xg + t * w.n_in, w.n_in, qs + t * w.n_in, d + t, ds + t, detail::kDecodeLanes);
      }
      dx.qs = qs;
      dx.d = d;
      dx.ds = ds;
      if (kernels.prepare_extra) {
        void* extra = extra_base + static_cast<size_t>(g) * extra_stride_;
        kernels.prepare_extra(w.dtype, dx, extra);
        dx.extra = extra;
      }
    } else {
      dx.f32 = xg;
    }
  }
  // Rows per tile when several groups share it: about kDecodeTileBytes of weights, whole
  // kDecodeRowGrain units.
  const int64_t tile_rows = n_groups == 1 ? w.n_out
                                          : std::max<int64_t>(kDecodeRowGrain, kDecodeTileBytes / static_cast<int64_t>(w.row_bytes()) /
                                                                                   kDecodeRowGrain * kDecodeRowGrain);
  struct Job {
    const detail::MatmulKernels* kernels;
    const WeightView* w;
    const detail::DecodeX* groups;
    int64_t n_groups;
    int64_t tile_rows;
    float* y;
  } job{&kernels, &w, groups.data(), n_groups, tile_rows, y};
  // Captures one pointer, so std::function stores it inline (no allocation per call).
  pool_.parallel_for(
      w.n_out,
      [&job](int64_t begin, int64_t end, int) {
        const int64_t ldy = job.w->n_out;
        for (int64_t o0 = begin; o0 < end; o0 += job.tile_rows) {
          const int64_t o1 = std::min(end, o0 + job.tile_rows);
          for (int64_t g = 0; g < job.n_groups; ++g) {
            job.kernels->decode_rows(*job.w, job.groups[g], o0, o1, job.y + g * kDecodeGroupTokens * ldy, ldy);
          }
        }
      },
      ThreadPool::grain_for(w.n_in * n_tokens, ThreadPool::kMinWorkPerThread, kDecodeRowGrain));
}

namespace {

// What a prefill path's pool lambdas capture: one pointer to this, so std::function stores it
// inline (no allocation per call).
struct PrefillJob {
  Matmul* self;
  const WeightView* w;
  const float* x;
  int64_t n_tokens;
  float* y;
};

}  // namespace

void Matmul::run_prefill_amx(const WeightView& w, const float* x, int64_t n_tokens, float* y) {
  PrefillJob job{this, &w, x, n_tokens, y};
  const int64_t n_in = w.n_in;
  pool_.parallel_for(
      n_tokens,
      [&job](int64_t begin, int64_t end, int) {
        const int64_t n = job.w->n_in;
        detail::amx_split_x(job.x + begin * n, end - begin, n, job.self->x_hi_.data() + begin * n,
                            job.self->x_lo_.data() + begin * n);
      },
      ThreadPool::grain_for(n_in, ThreadPool::kMinWorkPerThread));
  detail::amx_zero_pad_x(n_tokens, n_in, x_hi_.data(), x_lo_.data());
  pool_.parallel_for(
      w.n_out,
      [&job](int64_t begin, int64_t end, int thread) {
        Matmul& m = *job.self;
        const WeightView& w = *job.w;
        const detail::MatmulKernels& kernels = detail::matmul_kernels(m.isa_);
        float* scratch = m.w_scratch_[static_cast<size_t>(thread)].data();  // [kBlasRowChunk, n_in]
        uint16_t* w_hi = m.w_packed_[static_cast<size_t>(thread)].data();
        uint16_t* w_lo = w_hi + detail::kAmxRowChunk * w.n_in;
        float* c = m.c_scratch_[static_cast<size_t>(thread)].data();
        c = reinterpret_cast<float*>((reinterpret_cast<uintptr_t>(c) + 63) / 64 * 64);
        const bool with_lo = w.dtype != DType::kBF16;  // BF16 weights are exactly their hi part
        for (int64_t o0 = begin; o0 < end; o0 += detail::kAmxRowChunk) {
          const int64_t rows = std::min(detail::kAmxRowChunk, end - o0);
          kernels.dequantize_rows(w, o0, rows, scratch);
          detail::amx_pack_w(scratch, rows, w.n_in, with_lo, w_hi, w_lo);
          detail::amx_gemm(m.x_hi_.data(), m.x_lo_.data(), job.n_tokens, w.n_in, w_hi, w_lo, with_lo, rows, job.y + o0,
                           w.n_out, c);
        }
      },
      detail::kAmxRowChunk);
}

void Matmul::run_prefill_int8(const WeightView& w, const float* x, int64_t n_tokens, float* y) {
  // AVX-512 VNNI, or AVX2 (whose Q8_0 kernel takes the quants signed: kernels/matmul_int8.h).
  const bool avx512 = isa_ >= Isa::kAvx512;
  const detail::Int8XForm form{detail::matmul_kernels(isa_).quantize_x,
                               avx512 ? detail::int8_quantize_q8k : quantize_row_q8_k,
                               !avx512 && w.dtype == DType::kQ8_0};
  const auto gemm_rows = avx512 ? detail::int8_gemm_rows_avx512 : detail::int8_gemm_rows_avx2;
  PrefillJob job{this, &w, x, n_tokens, y};
  pool_.parallel_for(
      n_tokens,
      [&job, &form](int64_t begin, int64_t end, int thread) {
        detail::Int8Scratch& s = *job.self->int8_;
        detail::int8_prepare_x(job.w->dtype, job.x, begin, end, job.w->n_in, form, s.x,
                               s.w[static_cast<size_t>(thread)]);
      },
      ThreadPool::grain_for(w.n_in, ThreadPool::kMinWorkPerThread));
  detail::int8_pad_x(w.dtype, n_tokens, w.n_in, form, int8_->x);
  pool_.parallel_for(
      w.n_out,
      [&job, gemm_rows](int64_t begin, int64_t end, int thread) {
        detail::Int8Scratch& s = *job.self->int8_;
        for (int64_t o0 = begin; o0 < end; o0 += detail::kInt8RowChunk) {
          gemm_rows(*job.w, o0, std::min(end, o0 + detail::kInt8RowChunk), s.x, job.n_tokens,
                    s.w[static_cast<size_t>(thread)], job.y, job.w->n_out);
        }
      },
      detail::kInt8RowChunk);
}

void Matmul::run_prefill_bf16(const WeightView& w, const float* x, int64_t n_tokens, float* y) {
  PrefillJob job{this, &w, x, n_tokens, y};
  pool_.parallel_for(
      n_tokens,
      [&job](int64_t begin, int64_t end, int thread) {
        detail::Bf16Scratch& s = *job.self->bf16_;
        detail::bf16_prepare_x(job.x, begin, end, job.w->n_in, s.w[static_cast<size_t>(thread)].data(), s.x_data());
      },
      ThreadPool::grain_for(w.n_in, ThreadPool::kMinWorkPerThread));
  detail::bf16_pad_x(n_tokens, w.n_in, bf16_->x_data());
  pool_.parallel_for(
      w.n_out,
      [&job](int64_t begin, int64_t end, int thread) {
        detail::Bf16Scratch& s = *job.self->bf16_;
        for (int64_t o0 = begin; o0 < end; o0 += detail::kBf16RowChunk) {
          detail::bf16_gemm_rows(*job.w, o0, std::min(end, o0 + detail::kBf16RowChunk), s.x_data(), job.n_tokens,
                                 s.w[static_cast<size_t>(thread)].data(), job.y, job.w->n_out);
        }
      },
      detail::kBf16RowChunk);
}

void Matmul::run_f32(const WeightView& w, const float* x, int64_t n_tokens, float* y) {
  PrefillJob job{this, &w, x, n_tokens, y};
  pool_.parallel_for(
      n_tokens,
      [&job](int64_t begin, int64_t end, int) {
        detail::f32_prepare_x(job.x, begin, end, job.w->n_in, job.self->f32_->x_data());
      },
      ThreadPool::grain_for(w.n_in, ThreadPool::kMinWorkPerThread));
  detail::f32_pad_x(n_tokens, w.n_in, f32_->x_data());
  pool_.parallel_for(
      w.n_out,
      [&job](int64_t begin, int64_t end, int thread) {
        detail::F32Scratch& s = *job.self->f32_;
        float* chunk = detail::F32Scratch::aligned(s.w[static_cast<size_t>(thread)]) + detail::kF32ChunkGuard;
        const auto gemm_rows = job.self->isa_ >= Isa::kAvx512 ? detail::f32_gemm_rows : detail::f32_gemm_rows_avx2;
        for (int64_t o0 = begin; o0 < end; o0 += detail::kF32RowChunk) {
          gemm_rows(*job.w, o0, std::min(end, o0 + detail::kF32RowChunk), s.x_data(), job.n_tokens, chunk, job.y,
                    job.w->n_out);
        }
      },
      detail::kF32RowChunk);
}

void Matmul::run_prefill(const WeightView& w, const float* x, int64_t n_tokens, float* y) {
  PrefillJob job{this, &w, x, n_tokens, y};
  pool_.parallel_for(
      w.n_out,
      [&job](int64_t begin, int64_t end, int thread) {
        const WeightView& w = *job.w;
        const int n_in = static_cast<int>(w.n_in);
        const int ldc = static_cast<int>(w.n_out);
        if (w.dtype == DType::kF32) {  // y[:, begin:end] = x W[begin:end]^T straight from the weights
          cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(job.n_tokens),
                      static_cast<int>(end - begin), n_in, 1.0f, job.x, n_in,
                      reinterpret_cast<const float*>(w.row(begin)), n_in, 0.0f, job.y + begin, ldc);
          return;
        }
        const detail::MatmulKernels& kernels = detail::matmul_kernels(job.self->isa_);
        float* scratch = job.self->w_scratch_[static_cast<size_t>(thread)].data();  // [kBlasRowChunk, n_in]
        for (int64_t o0 = begin; o0 < end; o0 += kBlasRowChunk) {
          const int64_t rows = std::min(kBlasRowChunk, end - o0);
          kernels.dequantize_rows(w, o0, rows, scratch);
          cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(job.n_tokens), static_cast<int>(rows),
                      n_in, 1.0f, job.x, n_in, scratch, n_in, 0.0f, job.y + o0, ldc);
        }
      },
      kBlasRowChunk);
}

}  // namespace pagoda::kernels
