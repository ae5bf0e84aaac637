// The value stored under a block's Redis key (store/redis_tier.h): header + payload in one
// value, so a reader never sees metadata without its bytes.
//
//   compression none: the BlockRecord itself (kvcache/block_record.h), byte for byte.
//   lz4 / zstd: an envelope around it (little-endian):
//     [0, 4)   magic "PGKZ" (u32 0x5A4B4750)
//     [4]      codec: 1 lz4 (block format), 2 zstd (frame)
//     [5]      shuffle: 0, or the element size whose bytes were split into planes before
//              compressing (2 for f16/bf16 KV, 4 for f32): exponent bytes compress, mantissas not
//     [6, 8)   zero
//     [8, 16)  raw size: bytes of the record inside
//     [16, ..) the compressed (shuffled) record
//
// A reader accepts every form whatever it writes itself, and only a raw size equal to the record
// size its pool expects (a hostile value cannot make it allocate or inflate more). The record is
// then decoded and verified as any other (decode_block_record).
#pragma once

#include <cstdint>
#include <vector>

#include "core/status.h"
#include "kvcache/block_record.h"
#include "store/redis_url.h"

typedef struct ZSTD_CCtx_s ZSTD_CCtx;
typedef struct ZSTD_DCtx_s ZSTD_DCtx;

namespace pagoda::store {

inline constexpr uint32_t kRecordEnvelopeMagic = 0x5A4B4750;  // "PGKZ"
inline constexpr int64_t kRecordEnvelopeBytes = 16;

// A growable byte buffer whose data is 8-byte aligned (records are read in place).
class RecordScratch {
 public:
  uint8_t* resize(int64_t bytes);
  uint8_t* data() { return reinterpret_cast<uint8_t*>(words_.data()); }
  int64_t size() const { return size_; }
  kvcache::ConstByteSpan span() const { return {reinterpret_cast<const uint8_t*>(words_.data()), static_cast<size_t>(size_)}; }

 private:
  std::vector<uint64_t> words_;
  int64_t size_ = 0;
};

class RecordValueCodec {
 public:
  // level: zstd's (1..19; 0 = its default 3), lz4's acceleration (>= 1). shuffle: 0, 2 or 4.
  RecordValueCodec(RedisCompression compression, int level, int shuffle);
  ~RecordValueCodec();
  RecordValueCodec(const RecordValueCodec&) = delete;
  RecordValueCodec& operator=(const RecordValueCodec&) = delete;

  RedisCompression compression() const { return compression_; }
  // The value for `record`: the record itself (none, or when compressing would not make it
  // smaller), or an envelope written into `out`.
  kvcache::ConstByteSpan encode(kvcache::ConstByteSpan record, RecordScratch& out);
  // The record inside `value`, 4-byte aligned: `value` itself when it is a plain record at an
  // aligned address, else a copy or the decompressed record in `out`. Errors say what is wrong.
  Result<kvcache::ConstByteSpan> decode(kvcache::ConstByteSpan value, int64_t expected_record_bytes, RecordScratch& out);

 private:
  RedisCompression compression_;
  int level_;
  int shuffle_;
  ZSTD_CCtx* zstd_c_ = nullptr;  // owned
  ZSTD_DCtx* zstd_d_ = nullptr;  // owned
  RecordScratch shuffled_;       // the shuffled record (encode) or the still-shuffled one (decode)
};

// Splits the bytes of `n / elem` elements into `elem` planes (byte 0 of every element, then
// byte 1, ...); the bytes past the last whole element stay in place. unshuffle inverts it.
void shuffle_bytes(const uint8_t* in, uint8_t* out, int64_t n, int elem);
void unshuffle_bytes(const uint8_t* in, uint8_t* out, int64_t n, int elem);

}  // namespace pagoda::store
