// BlockRecord: the one serialized form of a cached KV block, moved by every tier (host DRAM,
// SSD, Redis) and every transport (P/D over UCX) (DESIGN.md §2). A reader can never see
// metadata without its bytes: header, token ids and payload travel as one record, and one
// checksum covers all three.
//
// Layout (little-endian; offsets in bytes):
//   [0, 128)                 header (below)
//   [128, 128 + 4 x B)       token ids of the block, int32 [block_size]
//   [.., header_bytes)       zero padding up to a multiple of 64 (kRecordAlign)
//   [header_bytes, +payload) payload: for layer l = 0..n_layer-1, K block then V block of layer l,
//                            each exactly kernels::kv_block_bytes_k/_v of the KV format
//                            (BlockPool::block_segments gives the same spans in the same order)
// Header: magic "PGKV" (u32 0x564B4750), version u16, header_bytes u16, block_size u32,
// n_layer u32, n_kv_head u32, head_dim u32, kv_dtype u8, kv_layout u8, k_only u8 (1: MLA latent
// blocks, K only, no V blocks in the payload), 5 reserved zero bytes,
// payload_bytes u64, model_fingerprint u64, kv_format u64, cache_salt u64, block_hash u64,
// parent_hash u64, checksum u64, then zeros to 128.
// checksum = XXH3_64bits (libxxhash) of the whole record with the checksum field read as 0.
//
// Version rules: a reader rejects other magic, versions it does not know, and any size that
// disagrees with the others (a truncated or padded record is an error, never a short read).
#pragma once

#include <cstdint>
#include <span>

#include "core/status.h"
#include "kernels/kv_format.h"
#include "kvcache/block_hash.h"
#include "kvcache/kv_layout.h"

namespace pagoda::kvcache {

using ByteSpan = std::span<uint8_t>;
using ConstByteSpan = std::span<const uint8_t>;

inline constexpr uint32_t kBlockRecordMagic = 0x564B4750;  // "PGKV"
inline constexpr uint16_t kBlockRecordVersion = 1;
inline constexpr int64_t kRecordFixedHeaderBytes = 128;
inline constexpr int64_t kRecordAlign = 64;

// What a record says about its block.
struct BlockRecordMeta {
  KvNamespace ns;                  // model fingerprint, KV format key, cache salt
  BlockHash block_hash = 0;        // chained hash (block_hash.h)
  BlockHash parent_hash = kRootBlockHash;
  int32_t block_size = 0;          // tokens
  int32_t n_layer = 0, n_kv_head = 0, head_dim = 0;
  kernels::KvDType kv_dtype = kernels::KvDType::kF32;
  kernels::KvLayoutKind kv_layout = kernels::KvLayoutKind::kND;
  bool k_only = false;             // MLA latent cache: no V blocks
  int64_t payload_bytes = 0;       // n_layer x (K + V block bytes)
};

// The meta of a block of `layout` (shape, format, payload size); hashes and namespace left 0.
BlockRecordMeta record_meta_for(const KvLayout& layout);

// Header + token ids + padding, for `block_size` tokens.
int64_t record_header_bytes(int64_t block_size);
// The whole record.
inline int64_t record_bytes(const BlockRecordMeta& meta) {
  return record_header_bytes(meta.block_size) + meta.payload_bytes;
}

// Writes the record into `out` (exactly record_bytes(meta) bytes): header, tokens
// ([meta.block_size]) and the payload gathered from `payload` in order (their sizes must sum to
// meta.payload_bytes). Computes the checksum. Preconditions (CHECKed): sizes agree.
void encode_block_record(const BlockRecordMeta& meta, std::span<const int32_t> tokens,
                         std::span<const ConstByteSpan> payload, ByteSpan out);

// A parsed record; its spans point into the buffer given to decode_block_record.
struct BlockRecordView {
  BlockRecordMeta meta;
  std::span<const int32_t> tokens;  // [block_size]
  ConstByteSpan payload;            // [payload_bytes]
};

// Parses and verifies a record: magic, version, every size against the others and against
// bytes.size(), then the checksum. Any byte string is safe to pass (hostile input gets an error,
// never a read out of bounds). Precondition: bytes.data() is 4-byte aligned (CHECKed).
Result<BlockRecordView> decode_block_record(ConstByteSpan bytes);

// Parses the header alone (no checksum: the payload may not have been read yet), checking magic,
// version and sizes. Used to index records at start-up; decode_block_record still verifies
// the whole record before any byte is used. `bytes` holds at least the header and tokens.
Result<BlockRecordMeta> peek_block_record(ConstByteSpan bytes);

// A verified record is usable in a pool of `layout` for a block expected to be `hash` in
// namespace `ns`: same block size, shape, dtype, layout, payload size, namespace and hash.
// The caller still confirms the token ids against the prompt (a hash proposes, tokens decide).
Status check_block_record(const BlockRecordMeta& meta, const KvLayout& layout, const KvNamespace& ns,
                          BlockHash hash);

// Scatters a verified record's payload into a pool block's segments (BlockPool::block_segments).
void copy_record_payload(const BlockRecordView& record, std::span<const ByteSpan> dest);

}  // namespace pagoda::kvcache
