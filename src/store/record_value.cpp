#include "store/record_value.h"

#include <lz4.h>
#include <zstd.h>

#include <cstring>
#include <string>

namespace pagoda::store {
namespace {

template <typename T>
T load(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}
template <typename T>
void store(uint8_t* p, T v) {
  std::memcpy(p, &v, sizeof(T));
}

}  // namespace

uint8_t* RecordScratch::resize(int64_t bytes) {
  words_.resize(static_cast<size_t>((bytes + 7) / 8));
  size_ = bytes;
  return data();
}

void shuffle_bytes(const uint8_t* in, uint8_t* out, int64_t n, int elem) {
  const int64_t count = n / elem;
  for (int b = 0; b < elem; ++b) {
    uint8_t* plane = out + b * count;
    for (int64_t i = 0; i < count; ++i) plane[i] = in[i * elem + b];
  }
  // The tail that is no whole element (none for an empty value, whose pointers may be null).
  if (n > count * elem) std::memcpy(out + count * elem, in + count * elem, static_cast<size_t>(n - count * elem));
}

void unshuffle_bytes(const uint8_t* in, uint8_t* out, int64_t n, int elem) {
  const int64_t count = n / elem;
  for (int b = 0; b < elem; ++b) {
    const uint8_t* plane = in + b * count;
    for (int64_t i = 0; i < count; ++i) out[i * elem + b] = plane[i];
  }
  // The tail that is no whole element (none for an empty value, whose pointers may be null).
  if (n > count * elem) std::memcpy(out + count * elem, in + count * elem, static_cast<size_t>(n - count * elem));
}

RecordValueCodec::RecordValueCodec(RedisCompression compression, int level, int shuffle)
    : compression_(compression), level_(level), shuffle_(shuffle) {
  CHECK(shuffle == 0 || shuffle == 2 || shuffle == 4) << "shuffle " << shuffle;
  zstd_d_ = ZSTD_createDCtx();
  CHECK(zstd_d_ != nullptr) << "ZSTD_createDCtx";
  if (compression_ == RedisCompression::kZstd) {
    zstd_c_ = ZSTD_createCCtx();
    CHECK(zstd_c_ != nullptr) << "ZSTD_createCCtx";
  }
}

RecordValueCodec::~RecordValueCodec() {
  ZSTD_freeCCtx(zstd_c_);
  ZSTD_freeDCtx(zstd_d_);
}

kvcache::ConstByteSpan RecordValueCodec::encode(kvcache::ConstByteSpan record, RecordScratch& out) {
  if (compression_ == RedisCompression::kNone) return record;
  const int64_t n = static_cast<int64_t>(record.size());
  const uint8_t* src = record.data();
  if (shuffle_ != 0) {
    shuffle_bytes(record.data(), shuffled_.resize(n), n, shuffle_);
    src = shuffled_.data();
  }
  int64_t packed = 0;
  if (compression_ == RedisCompression::kLz4) {
    CHECK_LE(n, int64_t{LZ4_MAX_INPUT_SIZE}) << "record too large for lz4";
    const int bound = LZ4_compressBound(static_cast<int>(n));
    uint8_t* dst = out.resize(kRecordEnvelopeBytes + bound) + kRecordEnvelopeBytes;
    packed = LZ4_compress_fast(reinterpret_cast<const char*>(src), reinterpret_cast<char*>(dst), static_cast<int>(n),
                               bound, level_ < 1 ? 1 : level_);
    CHECK_GT(packed, 0) << "LZ4_compress_fast";
  } else {
    const size_t bound = ZSTD_compressBound(static_cast<size_t>(n));
    uint8_t* dst = out.resize(kRecordEnvelopeBytes + static_cast<int64_t>(bound)) + kRecordEnvelopeBytes;
    const size_t r = ZSTD_compressCCtx(zstd_c_, dst, bound, src, static_cast<size_t>(n), level_ == 0 ? ZSTD_CLEVEL_DEFAULT : level_);
    CHECK(!ZSTD_isError(r)) << "ZSTD_compressCCtx: " << ZSTD_getErrorName(r);
    packed = static_cast<int64_t>(r);
  }
  if (kRecordEnvelopeBytes + packed >= n) return record;  // incompressible: the plain record is smaller
  uint8_t* h = out.data();
  std::memset(h, 0, kRecordEnvelopeBytes);
  store<uint32_t>(h, kRecordEnvelopeMagic);
  h[4] = static_cast<uint8_t>(compression_);
  h[5] = static_cast<uint8_t>(shuffle_);
  store<uint64_t>(h + 8, static_cast<uint64_t>(n));
  out.resize(kRecordEnvelopeBytes + packed);
  return out.span();
}

Result<kvcache::ConstByteSpan> RecordValueCodec::decode(kvcache::ConstByteSpan value, int64_t expected_record_bytes,
                                                          RecordScratch& out) {
  const int64_t size = static_cast<int64_t>(value.size());
  if (size < 4) return Status::error("value of " + std::to_string(size) + " bytes is no block record");
  const uint32_t magic = load<uint32_t>(value.data());
  if (magic == kvcache::kBlockRecordMagic) {
    if (reinterpret_cast<uintptr_t>(value.data()) % 4 == 0) return value;
    std::memcpy(out.resize(size), value.data(), value.size());
    return out.span();
  }
  if (magic != kRecordEnvelopeMagic) return Status::error("value is neither a block record nor a compressed one (bad magic)");
  if (size < kRecordEnvelopeBytes) return Status::error("compressed record envelope truncated");
  const uint8_t codec = value[4], shuffle = value[5];
  const uint64_t raw = load<uint64_t>(value.data() + 8);
  if (value[6] != 0 || value[7] != 0) return Status::error("compressed record envelope: reserved bytes are not zero");
  if (shuffle != 0 && shuffle != 2 && shuffle != 4) return Status::error("compressed record: shuffle " + std::to_string(shuffle));
  if (raw != static_cast<uint64_t>(expected_record_bytes)) {
    return Status::error("compressed record of " + std::to_string(raw) + " bytes, this pool's records have " +
                         std::to_string(expected_record_bytes));
  }
  const int64_t n = expected_record_bytes;
  uint8_t* dst = shuffle != 0 ? shuffled_.resize(n) : out.resize(n);
  const uint8_t* packed = value.data() + kRecordEnvelopeBytes;
  const int64_t packed_bytes = size - kRecordEnvelopeBytes;
  if (codec == static_cast<uint8_t>(RedisCompression::kLz4)) {
    if (n > LZ4_MAX_INPUT_SIZE || packed_bytes > LZ4_MAX_INPUT_SIZE) return Status::error("lz4 record too large");
    const int got = LZ4_decompress_safe(reinterpret_cast<const char*>(packed), reinterpret_cast<char*>(dst),
                                        static_cast<int>(packed_bytes), static_cast<int>(n));
    if (got != n) return Status::error("lz4 record does not decompress to its size (corrupt or truncated)");
  } else if (codec == static_cast<uint8_t>(RedisCompression::kZstd)) {
    const size_t got = ZSTD_decompressDCtx(zstd_d_, dst, static_cast<size_t>(n), packed, static_cast<size_t>(packed_bytes));
    if (ZSTD_isError(got) || got != static_cast<size_t>(n)) {
      return Status::error(std::string("zstd record does not decompress to its size: ") +
                           (ZSTD_isError(got) ? ZSTD_getErrorName(got) : "short"));
    }
  } else {
    return Status::error("compressed record: unknown codec " + std::to_string(codec));
  }
  if (shuffle != 0) unshuffle_bytes(shuffled_.data(), out.resize(n), n, shuffle);
  return out.span();
}

}  // namespace pagoda::store
