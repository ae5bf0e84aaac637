// AMX-BF16 prefill GEMM (kernels/matmul_amx.h). Compiled with -mamx-tile -mamx-bf16
// -mavx512bf16 (src/kernels/CMakeLists.txt); called only when amx_usable().
#include "kernels/matmul_amx.h"

#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "core/check.h"

namespace pagoda::kernels::detail {
namespace {

// bf16 (round to nearest even) of 16 floats and the f32 value of each.
inline __m256i to_bf16(__m512 v) { return reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(v)); }
inline __m512 from_bf16(__m256i h) { return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16)); }

struct alignas(64) TileConfig {
  uint8_t palette_id = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

// Tiles 0-3: C (2 x 2 blocks of 16 x 16 f32); 4, 5: A (16 tokens x 32 bf16); 6, 7: B (16 pairs x 16 rows x 2).
void configure_tiles() {
  TileConfig cfg;
  for (int t = 0; t < 8; ++t) {
    cfg.colsb[t] = 64;
    cfg.rows[t] = 16;
  }
  _tile_loadconfig(&cfg);
}

}  // namespace

void amx_split_x(const float* x, int64_t rows, int64_t n_in, uint16_t* hi, uint16_t* lo) {
  CHECK_EQ(n_in % 32, 0);
  for (int64_t i = 0; i < rows * n_in; i += 16) {
    const __m512 v = _mm512_loadu_ps(x + i);
    const __m256i h = to_bf16(v);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(hi + i), h);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(lo + i), to_bf16(_mm512_sub_ps(v, from_bf16(h))));
  }
}

void amx_zero_pad_x(int64_t rows, int64_t n_in, uint16_t* hi, uint16_t* lo) {
  const int64_t pad = amx_pad32(rows) - rows;
  std::memset(hi + rows * n_in, 0, pad * n_in * sizeof(uint16_t));
  std::memset(lo + rows * n_in, 0, pad * n_in * sizeof(uint16_t));
}

void amx_pack_w(const float* w, int64_t rows, int64_t n_in, bool with_lo, uint16_t* hi, uint16_t* lo) {
  CHECK_LE(rows, kAmxRowChunk);
  CHECK_EQ(n_in % 32, 0);
  const int64_t k_tiles = n_in / 32, n_tiles = amx_pad32(rows) / 16;
  alignas(64) uint32_t th[16][16], tl[16][16];  // [row][pair]
  for (int64_t nt = 0; nt < n_tiles; ++nt) {
    for (int64_t kt = 0; kt < k_tiles; ++kt) {
      for (int64_t n = 0; n < 16; ++n) {
        const int64_t r = nt * 16 + n;
        if (r >= rows) {
          std::memset(th[n], 0, sizeof(th[n]));
          std::memset(tl[n], 0, sizeof(tl[n]));
          continue;
        }
        const float* src = w + r * n_in + kt * 32;
        const __m512 a = _mm512_loadu_ps(src), b = _mm512_loadu_ps(src + 16);
        const __m256i ha = to_bf16(a), hb = to_bf16(b);
        _mm256_store_si256(reinterpret_cast<__m256i*>(th[n]), ha);
        _mm256_store_si256(reinterpret_cast<__m256i*>(th[n]) + 1, hb);
        if (with_lo) {
          _mm256_store_si256(reinterpret_cast<__m256i*>(tl[n]), to_bf16(_mm512_sub_ps(a, from_bf16(ha))));
          _mm256_store_si256(reinterpret_cast<__m256i*>(tl[n]) + 1, to_bf16(_mm512_sub_ps(b, from_bf16(hb))));
        }
      }
      // Tile row = pair p: (row 0's pair p, row 1's pair p, ...): a 16 x 16 transpose of pairs.
      auto* dh = reinterpret_cast<uint32_t*>(hi + (nt * k_tiles + kt) * 512);
      auto* dl = reinterpret_cast<uint32_t*>(lo + (nt * k_tiles + kt) * 512);
      for (int p = 0; p < 16; ++p) {
        for (int n = 0; n < 16; ++n) dh[p * 16 + n] = th[n][p];
      }
      if (with_lo) {
        for (int p = 0; p < 16; ++p) {
          for (int n = 0; n < 16; ++n) dl[p * 16 + n] = tl[n][p];
        }
      }
    }
  }
}

void amx_gemm(const uint16_t* x_hi, const uint16_t* x_lo, int64_t m, int64_t n_in, const uint16_t* w_hi,
              const uint16_t* w_lo, bool with_lo, int64_t rows, float* y, int64_t ldy, float* ctmp) {
  configure_tiles();
  const int64_t k_tiles = n_in / 32, m_pad = amx_pad32(m), rows_pad = amx_pad32(rows);
  const int64_t lda = n_in * 2;  // bytes per x row
  for (int64_t t0 = 0; t0 < m_pad; t0 += 32) {
    const uint16_t* ah = x_hi + t0 * n_in;
    const uint16_t* al = x_lo + t0 * n_in;
    for (int64_t r0 = 0; r0 < rows_pad; r0 += 32) {
      const uint16_t* bh0 = w_hi + (r0 / 16) * k_tiles * 512;
      const uint16_t* bh1 = bh0 + k_tiles * 512;
      const uint16_t* bl0 = w_lo + (r0 / 16) * k_tiles * 512;
      const uint16_t* bl1 = bl0 + k_tiles * 512;
      _tile_zero(0);
      _tile_zero(1);
      _tile_zero(2);
      _tile_zero(3);
      for (int64_t kt = 0; kt < k_tiles; ++kt) {
        const int64_t k = kt * 32, b = kt * 512;
        _tile_loadd(4, ah + k, lda);
        _tile_loadd(5, ah + 16 * n_in + k, lda);
        _tile_loadd(6, bh0 + b, 64);
        _tile_loadd(7, bh1 + b, 64);
        _tile_dpbf16ps(0, 4, 6);
        _tile_dpbf16ps(1, 4, 7);
        _tile_dpbf16ps(2, 5, 6);
        _tile_dpbf16ps(3, 5, 7);
        if (with_lo) {  // w_lo x_hi
          _tile_loadd(6, bl0 + b, 64);
          _tile_loadd(7, bl1 + b, 64);
          _tile_dpbf16ps(0, 4, 6);
          _tile_dpbf16ps(1, 4, 7);
          _tile_dpbf16ps(2, 5, 6);
          _tile_dpbf16ps(3, 5, 7);
          _tile_loadd(6, bh0 + b, 64);
          _tile_loadd(7, bh1 + b, 64);
        }
        // w_hi x_lo
        _tile_loadd(4, al + k, lda);
        _tile_loadd(5, al + 16 * n_in + k, lda);
        _tile_dpbf16ps(0, 4, 6);
        _tile_dpbf16ps(1, 4, 7);
        _tile_dpbf16ps(2, 5, 6);
        _tile_dpbf16ps(3, 5, 7);
      }
      _tile_stored(0, ctmp, 128);
      _tile_stored(1, ctmp + 16, 128);
      _tile_stored(2, ctmp + 16 * 32, 128);
      _tile_stored(3, ctmp + 16 * 32 + 16, 128);
      const int64_t tn = std::min<int64_t>(32, m - t0), rn = std::min<int64_t>(32, rows - r0);
      for (int64_t t = 0; t < tn; ++t) std::memcpy(y + (t0 + t) * ldy + r0, ctmp + t * 32, rn * sizeof(float));
    }
  }
  _tile_release();
}

}  // namespace pagoda::kernels::detail
