// The int8 GEMM's data preparation (AVX2 code, run by the AVX2 and the AVX-512 kernels): the
// x panel (x quantized, as the decode path does, then laid out 16 tokens to a register) and
// the weight rows unpacked into s8 codes with their scales and biases (layouts:
// kernels/matmul_int8.h).
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "core/check.h"
#include "kernels/kquant.h"
#include "kernels/matmul_int8.h"
#include "kernels/quant.h"

namespace pagoda::kernels::detail {

void Int8X::resize(int64_t max_tokens, int64_t max_in) {
  const int64_t pad = panel_pad_tokens(max_tokens);
  u.resize(static_cast<size_t>(pad * max_in + 64));
  d.resize(static_cast<size_t>(pad * (max_in / kQK)));
  ds.resize(d.size());
  xs.resize(static_cast<size_t>(pad * (max_in / kQK_K) * 4));
}

void Int8W::resize(int64_t max_in) {
  const auto rows = static_cast<size_t>(kInt8RowChunk);
  c.resize(rows * static_cast<size_t>(max_in));
  scale.resize(rows * static_cast<size_t>(max_in / kQK));
  bias.resize(scale.size());
  const auto supers = rows * static_cast<size_t>(max_in / kQK_K);
  d.resize(supers);
  dmin.resize(supers);
  sc.resize(supers * 16);
  mins.resize(supers * 4);
  x_qs.resize(static_cast<size_t>(max_in));
  x_q8k.resize(static_cast<size_t>(max_in / kQK_K));
}

namespace {

inline float half_to_float(uint16_t h) { return _cvtsh_ss(h); }
inline int32_t load_i32(const void* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

// ---- weight rows ----

// Row r of the chunk from a Q8_0 / Q4_0 row.
void unpack_block32(DType dtype, const uint8_t* row, int64_t n_in, int64_t r, Int8W& w) {
  const int64_t nb = n_in / kQK;
  int8_t* c = w.c.data() + r * n_in;
  for (int64_t b = 0; b < nb; ++b) {
    int8_t* cb = c + b * kQK;
    uint16_t d16;
    if (dtype == DType::kQ8_0) {
      const auto& blk = reinterpret_cast<const BlockQ8_0*>(row)[b];
      d16 = blk.d;
      std::memcpy(cb, blk.qs, kQK);
    } else {
      const auto& blk = reinterpret_cast<const BlockQ4_0*>(row)[b];
      d16 = blk.d;
      for (int j = 0; j < kQK / 2; ++j) {
        cb[j] = static_cast<int8_t>((blk.qs[j] & 15) - 8);
        cb[j + kQK / 2] = static_cast<int8_t>((blk.qs[j] >> 4) - 8);
      }
    }
    int32_t sum = 0;
    for (int j = 0; j < kQK; ++j) sum += cb[j];
    w.scale[r * nb + b] = half_to_float(d16);
    w.bias[r * nb + b] = -128 * sum;
  }
}

// Sum of the 32 unsigned bytes of v (lanes 0-1 and 2-3 of the sad: bytes 0-15, 16-31).
inline __m256i sad32(__m256i v) { return _mm256_sad_epu8(v, _mm256_setzero_si256()); }
inline int32_t sum_lo16(__m256i sad) { return _mm256_extract_epi32(sad, 0) + _mm256_extract_epi32(sad, 2); }
inline int32_t sum_hi16(__m256i sad) { return _mm256_extract_epi32(sad, 4) + _mm256_extract_epi32(sad, 6); }

// Row r of the chunk from a Q4_K / Q5_K / Q6_K row (the value order of kernels/kquant.h).
void unpack_kquant(DType dtype, const uint8_t* row, int64_t n_in, int64_t r, Int8W& w) {
  const int64_t ns = n_in / kQK_K;
  const __m256i low4 = _mm256_set1_epi8(15), low2 = _mm256_set1_epi8(3), one = _mm256_set1_epi8(1);
  for (int64_t s = 0; s < ns; ++s) {
    int8_t* c = w.c.data() + r * n_in + s * kQK_K;
    const int64_t si = r * ns + s;
    int32_t* sc = w.sc.data() + si * 16;
    int32_t bias = 0;
    if (dtype == DType::kQ6_K) {
      const auto& blk = reinterpret_cast<const BlockQ6_K*>(row)[s];
      int32_t sums[16];  // of q (0..63) per 16-value sub-block
      for (int h = 0; h < 2; ++h) {
        const __m256i l0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk.ql + 64 * h));
        const __m256i l1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk.ql + 64 * h + 32));
        const __m256i hb = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk.qh + 32 * h));
        const auto high = [&](int shift) {
          return _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hb, shift), low2), 4);
        };
        const __m256i v[4] = {_mm256_or_si256(_mm256_and_si256(l0, low4), high(0)),
                              _mm256_or_si256(_mm256_and_si256(l1, low4), high(2)),
                              _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), low4), high(4)),
                              _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), low4), high(6))};
        for (int g = 0; g < 4; ++g) {  // values 128h + 32g .. +31: sub-blocks 8h + 2g, 8h + 2g + 1
          const __m256i sad = sad32(v[g]);
          sums[8 * h + 2 * g] = sum_lo16(sad);
          sums[8 * h + 2 * g + 1] = sum_hi16(sad);
          _mm256_storeu_si256(reinterpret_cast<__m256i*>(c + 128 * h + 32 * g),
                              _mm256_sub_epi8(v[g], _mm256_set1_epi8(32)));
        }
      }
      for (int j = 0; j < 16; ++j) {
        sc[j] = blk.scales[j];
        bias += sc[j] * (sums[j] - 32 * 16);
      }
      w.d[si] = half_to_float(blk.d);
      w.dmin[si] = 0.0f;
    } else {
      const uint8_t* qs;
      const uint8_t* qh = nullptr;
      const uint8_t* scales;
      uint16_t d16, dmin16;
      if (dtype == DType::kQ4_K) {
        const auto& blk = reinterpret_cast<const BlockQ4_K*>(row)[s];
        qs = blk.qs, scales = blk.scales, d16 = blk.d, dmin16 = blk.dmin;
      } else {
        const auto& blk = reinterpret_cast<const BlockQ5_K*>(row)[s];
        qs = blk.qs, qh = blk.qh, scales = blk.scales, d16 = blk.d, dmin16 = blk.dmin;
      }
      const __m256i hb = qh != nullptr ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qh))
                                       : _mm256_setzero_si256();
      int32_t sums[8];
      for (int ch = 0; ch < 4; ++ch) {  // values 64ch .. +31: sub-block 2ch (low nibbles), then 2ch + 1
        const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qs + 32 * ch));
        const __m128i lo_shift = _mm_cvtsi32_si128(2 * ch), hi_shift = _mm_cvtsi32_si128(2 * ch + 1);
        const __m256i hi1 = _mm256_slli_epi16(_mm256_and_si256(_mm256_srl_epi16(hb, lo_shift), one), 4);
        const __m256i hi2 = _mm256_slli_epi16(_mm256_and_si256(_mm256_srl_epi16(hb, hi_shift), one), 4);
        const __m256i v1 = _mm256_or_si256(_mm256_and_si256(q, low4), hi1);
        const __m256i v2 = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q, 4), low4), hi2);
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(c + 64 * ch), v1);
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(c + 64 * ch + 32), v2);
        const __m256i sad1 = sad32(v1), sad2 = sad32(v2);
        sums[2 * ch] = sum_lo16(sad1) + sum_hi16(sad1);
        sums[2 * ch + 1] = sum_lo16(sad2) + sum_hi16(sad2);
      }
      uint8_t sc8[8], m8[8];
      unpack_kquant_scales(scales, sc8, m8);
      for (int j = 0; j < 8; ++j) {
        sc[j] = sc8[j];
        bias += sc[j] * sums[j];
      }
      for (int j = 8; j < 16; ++j) sc[j] = 0;
      for (int p = 0; p < 4; ++p) w.mins[si * 4 + p] = m8[2 * p] | (m8[2 * p + 1] << 16);
      w.d[si] = half_to_float(d16);
      w.dmin[si] = half_to_float(dmin16);
    }
    w.bias[si] = -128 * bias;
  }
}

// Row r of the chunk as all zeros (padding to a multiple of 4 rows).
void zero_row(DType dtype, int64_t n_in, int64_t r, Int8W& w) {
  std::memset(w.c.data() + r * n_in, 0, static_cast<size_t>(n_in));
  if (is_kquant(dtype)) {
    const int64_t ns = n_in / kQK_K;
    std::fill_n(w.d.data() + r * ns, ns, 0.0f);
    std::fill_n(w.dmin.data() + r * ns, ns, 0.0f);
    std::fill_n(w.bias.data() + r * ns, ns, 0);
    std::fill_n(w.sc.data() + r * ns * 16, ns * 16, 0);
    std::fill_n(w.mins.data() + r * ns * 4, ns * 4, 0);
  } else {
    const int64_t nb = n_in / kQK;
    std::fill_n(w.scale.data() + r * nb, nb, 0.0f);
    std::fill_n(w.bias.data() + r * nb, nb, 0);
  }
}

}  // namespace

void int8_prepare_x(DType dtype, const float* x, int64_t t_begin, int64_t t_end, int64_t n_in, const Int8XForm& form,
                    Int8X& panel, Int8W& w) {
  uint8_t* u = panel.u_data();
  for (int64_t t = t_begin; t < t_end; ++t) {
    const float* xt = x + t * n_in;
    const int64_t g = t / kPanelLanes, lane = t % kPanelLanes;
    if (is_kquant(dtype)) {
      const int64_t ns = n_in / kQK_K;
      form.quantize_q8k(xt, w.x_q8k.data(), n_in);
      for (int64_t s = 0; s < ns; ++s) {
        const BlockQ8_K& blk = w.x_q8k[static_cast<size_t>(s)];
        std::memcpy(w.x_qs.data() + s * kQK_K, blk.qs, kQK_K);
        panel.d[static_cast<size_t>((g * ns + s) * kPanelLanes + lane)] = blk.d;
        for (int p = 0; p < 4; ++p) {
          const int32_t lo = blk.bsums[4 * p] + blk.bsums[4 * p + 1];
          const int32_t hi = blk.bsums[4 * p + 2] + blk.bsums[4 * p + 3];
          panel.xs[static_cast<size_t>(((g * ns + s) * 4 + p) * kPanelLanes + lane)] =
              static_cast<int32_t>((static_cast<uint32_t>(lo) & 0xffffu) | (static_cast<uint32_t>(hi) << 16));
        }
      }
    } else {
      const int64_t nb = n_in / kQK;
      float* d = panel.d.data() + g * nb * kPanelLanes + lane;
      form.quantize_x(xt, n_in, w.x_qs.data(), d, panel.ds.data() + (d - panel.d.data()), kPanelLanes);
    }
    panel_put(w.x_qs.data(), n_in / 4, t, form.signed_quants ? 0u : 0x80808080u, u);  // q or q + 128
  }
}

void int8_pad_x(DType dtype, int64_t n_tokens, int64_t n_in, const Int8XForm& form, Int8X& panel) {
  const int64_t nd = is_kquant(dtype) ? n_in / kQK_K : n_in / kQK;
  panel_pad(n_tokens, n_in / 4, form.signed_quants ? 0u : 0x80808080u, panel.u_data());  // quants 0
  for (int64_t t = n_tokens; t < panel_pad_tokens(n_tokens); ++t) {
    const int64_t g = t / kPanelLanes, lane = t % kPanelLanes;
    for (int64_t b = 0; b < nd; ++b) panel.d[static_cast<size_t>((g * nd + b) * kPanelLanes + lane)] = 0.0f;
    if (is_kquant(dtype)) {
      for (int64_t i = 0; i < nd * 4; ++i) panel.xs[static_cast<size_t>((g * nd * 4 + i) * kPanelLanes + lane)] = 0;
    }
  }
}

void int8_unpack_rows(const WeightView& wv, int64_t o_begin, int64_t rows, Int8W& w) {
  CHECK(rows >= 1 && rows <= kInt8RowChunk);
  for (int64_t r = 0; r < rows; ++r) {
    if (is_kquant(wv.dtype)) {
      unpack_kquant(wv.dtype, wv.row(o_begin + r), wv.n_in, r, w);
    } else {
      unpack_block32(wv.dtype, wv.row(o_begin + r), wv.n_in, r, w);
    }
  }
  for (int64_t r = rows; r < (rows + 3) / 4 * 4; ++r) zero_row(wv.dtype, wv.n_in, r, w);
}

}  // namespace pagoda::kernels::detail
