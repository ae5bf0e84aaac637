// Re-rotating cached K by a position offset (StreamingLLM: when a block is dropped from the
// middle of a sequence, every later position moves down by block_size, and the keys cached at
// the old positions must be rotated as if computed at the new ones). RoPE rotations compose:
// R(p + delta) = R(delta) R(p), so rotating a K row stored at p by delta gives the K row of
// position p + delta exactly in real arithmetic; the error is one decode + re-encode of the row.
#pragma once

#include <cstdint>
#include <span>

#include "kernels/kv_store.h"
#include "kernels/ops.h"

namespace pagoda::kernels {

// For each block id in `blocks` and each of its block_size rows: decodes the K row (every
// kv head), rotates it by `delta` positions with `params` (the model's RoPE parameters) and
// stores it back in the layer's format. Formats: f32/f16/bf16 (ND and NZ), int8, fp8-*;
// int4 is refused (CHECK: its K scales are per channel over a block, callers reject it at
// configuration time). Rows past a sequence's length are rotated too (harmless garbage).
// Precondition: params.head_dim == layer.head_dim.
void rope_shift_k(const KvLayerView& layer, std::span<const int32_t> blocks, int32_t delta, const RopeParams& params,
                  Isa isa = detect_isa());

}  // namespace pagoda::kernels
