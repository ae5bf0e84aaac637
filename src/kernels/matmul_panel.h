// Internal to the kernels: the token panel that the int8 and bf16 GEMMs (kernels/matmul_int8.h,
// kernels/matmul_bf16.h) read x from. One 64-byte register holds 4 bytes of each of
// kPanelLanes tokens for the same inputs (4 int8 quants or 2 bf16 values), so a kernel loads
// one register per 4 input bytes and multiplies it by a weight row's 4 bytes, broadcast:
//   panel [groups, steps, kPanelLanes, 4] bytes   group g: tokens kPanelLanes*g ..; step k:
//         bytes 4k .. 4k + 3 of a token's row; tokens padded to a multiple of kPanelLanes
// A kernel tile computes kR weight rows against kG groups into out [kR, kG, kPanelLanes].
#pragma once

#include <cstdint>
#include <cstring>

namespace pagoda::kernels::detail {

inline constexpr int64_t kPanelLanes = 16;  // tokens per register

inline int64_t panel_pad_tokens(int64_t n) { return (n + kPanelLanes - 1) / kPanelLanes * kPanelLanes; }

// Token t's row, `steps` units of 4 bytes, into the panel, each unit XORed with `flip`.
inline void panel_put(const void* row, int64_t steps, int64_t t, uint32_t flip, uint8_t* panel) {
  const auto* src = static_cast<const uint8_t*>(row);
  uint8_t* dst = panel + ((t / kPanelLanes) * steps * kPanelLanes + t % kPanelLanes) * 4;
  for (int64_t k = 0; k < steps; ++k) {
    uint32_t v;
    std::memcpy(&v, src + 4 * k, 4);
    v ^= flip;
    std::memcpy(dst + k * kPanelLanes * 4, &v, 4);
  }
}

// Tokens [n_tokens, panel_pad_tokens(n_tokens)): every unit `fill`.
inline void panel_pad(int64_t n_tokens, int64_t steps, uint32_t fill, uint8_t* panel) {
  for (int64_t t = n_tokens; t < panel_pad_tokens(n_tokens); ++t) {
    uint8_t* dst = panel + ((t / kPanelLanes) * steps * kPanelLanes + t % kPanelLanes) * 4;
    for (int64_t k = 0; k < steps; ++k) std::memcpy(dst + k * kPanelLanes * 4, &fill, 4);
  }
}

// A tile's results to y: y[t * ldy + r] = out[r][t / kPanelLanes - g0][t % kPanelLanes] for
// r < rows (<= kR), t in [kPanelLanes * g0, t_end), the tile holding kG token registers.
template <int kR, int kG>
inline void panel_write_tile(const float (&out)[kR][kG][kPanelLanes], int64_t rows, int64_t g0, int64_t t_end, float* y,
                             int64_t ldy) {
  for (int64_t t = g0 * kPanelLanes; t < t_end; ++t) {
    const int64_t g = t / kPanelLanes - g0, lane = t % kPanelLanes;
    float* yt = y + t * ldy;
    for (int64_t r = 0; r < rows; ++r) yt[r] = out[r][g][lane];
  }
}

}  // namespace pagoda::kernels::detail
