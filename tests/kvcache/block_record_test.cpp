#include "kvcache/block_record.h"

#include <gtest/gtest.h>
#include <xxhash.h>

#include <cstring>
#include <vector>

#include "core/rng.h"
#include "kvcache/block_pool.h"

namespace pagoda::kvcache {
namespace {

KvLayout layout(kernels::KvDType dtype, int64_t block_size = 4) {
  KvLayout l;
  l.n_layer = 3;
  l.n_kv_head = 2;
  l.head_dim = 8;
  l.block_size = block_size;
  l.dtype = dtype;
  return l;
}

struct Encoded {
  BlockRecordMeta meta;
  std::vector<int32_t> tokens;
  std::vector<uint8_t> payload;  // [payload_bytes] the gathered segments
  std::vector<uint64_t> storage; // 8-byte aligned record bytes
  ByteSpan bytes() { return {reinterpret_cast<uint8_t*>(storage.data()), static_cast<size_t>(record_bytes(meta))}; }
};

Encoded encode(const KvLayout& l, uint64_t seed) {
  Rng rng(seed);
  Encoded e;
  e.meta = record_meta_for(l);
  e.meta.ns = {11, 22, 33};
  e.meta.block_hash = rng.next_u64();
  e.meta.parent_hash = rng.next_u64();
  for (int64_t i = 0; i < l.block_size; ++i) e.tokens.push_back(static_cast<int32_t>(rng.next_u64() % 32000));
  e.payload.resize(static_cast<size_t>(e.meta.payload_bytes));
  for (auto& b : e.payload) b = static_cast<uint8_t>(rng.next_u64());
  // Two uneven segments: the record does not care where the gather boundaries fall.
  const size_t cut = e.payload.size() / 3;
  const ConstByteSpan segs[2] = {{e.payload.data(), cut}, {e.payload.data() + cut, e.payload.size() - cut}};
  e.storage.resize(static_cast<size_t>(record_bytes(e.meta) + 7) / 8);
  encode_block_record(e.meta, e.tokens, segs, e.bytes());
  return e;
}

TEST(BlockRecord, RoundTripsEveryKvFormat) {
  using kernels::KvDType;
  for (KvDType d : {KvDType::kF32, KvDType::kF16, KvDType::kBF16, KvDType::kFp8E4M3, KvDType::kFp8E5M2, KvDType::kInt8,
                    KvDType::kInt4}) {
    const KvLayout l = layout(d);
    Encoded e = encode(l, 7);
    EXPECT_EQ(record_header_bytes(l.block_size) % kRecordAlign, 0);
    auto v = decode_block_record(e.bytes());
    ASSERT_TRUE(v.is_ok()) << v.status().message();
    EXPECT_EQ(v->meta.block_hash, e.meta.block_hash);
    EXPECT_EQ(v->meta.parent_hash, e.meta.parent_hash);
    EXPECT_TRUE(v->meta.ns == e.meta.ns);
    EXPECT_EQ(std::vector<int32_t>(v->tokens.begin(), v->tokens.end()), e.tokens);
    ASSERT_EQ(v->payload.size(), e.payload.size());
    EXPECT_EQ(std::memcmp(v->payload.data(), e.payload.data(), e.payload.size()), 0);
    EXPECT_TRUE(check_block_record(v->meta, l, e.meta.ns, e.meta.block_hash).is_ok());
  }
}

TEST(BlockRecord, EveryFlippedByteIsDetected) {
  const KvLayout l = layout(kernels::KvDType::kF16, 2);
  Encoded e = encode(l, 9);
  ByteSpan b = e.bytes();
  for (size_t i = 0; i < b.size(); ++i) {
    b[i] ^= 0x20;
    EXPECT_FALSE(decode_block_record(b).is_ok()) << "byte " << i;
    b[i] ^= 0x20;
  }
  EXPECT_TRUE(decode_block_record(b).is_ok());
}

// Found by fuzz/block_record_fuzz.cpp (fuzz/corpus/block_record/crash-nonzero-padding): a record
// whose padding after the token ids is not zero, with its checksum recomputed, decoded (and so
// had two encodings). The reader now rejects it, checksum or not.
TEST(BlockRecord, NonZeroPaddingIsAnError) {
  const KvLayout l = layout(kernels::KvDType::kF16, 4);  // 4 tokens: 16 bytes, then 48 of padding
  Encoded e = encode(l, 5);
  ByteSpan b = e.bytes();
  const size_t pad = kRecordFixedHeaderBytes + 4 * 4 + 10;
  ASSERT_LT(pad, static_cast<size_t>(record_header_bytes(4)));
  b[pad] = 0x08;
  const uint64_t zero = 0;
  std::memcpy(b.data() + 80, &zero, 8);  // the checksum field, recomputed over the changed record
  const uint64_t sum = XXH3_64bits(b.data(), b.size());
  std::memcpy(b.data() + 80, &sum, 8);
  auto v = decode_block_record(b);
  ASSERT_FALSE(v.is_ok());
  EXPECT_NE(v.status().message().find("padding"), std::string::npos) << v.status().message();
  EXPECT_FALSE(peek_block_record(b).is_ok());
}

// Found by fuzz/block_record_fuzz.cpp (crash-row-width-overflow): kv heads x head dim near 2^32
// each overflowed the signed product that bounds the row width (undefined behaviour).
TEST(BlockRecord, HugeShapeFieldsAreErrorsWithoutOverflow) {
  const KvLayout l = layout(kernels::KvDType::kF16, 4);
  Encoded e = encode(l, 6);
  ByteSpan b = e.bytes();
  const uint32_t huge[2] = {0xFFFFFF01u, 0xFFFFFFFFu};
  std::memcpy(b.data() + 16, huge, sizeof(huge));  // n_kv_head, head_dim
  auto meta = peek_block_record(b);
  ASSERT_FALSE(meta.is_ok());
  EXPECT_NE(meta.status().message().find("out of range"), std::string::npos) << meta.status().message();
}

TEST(BlockRecord, TruncatedOrPaddedRecordsAreErrors) {
  const KvLayout l = layout(kernels::KvDType::kInt8);
  Encoded e = encode(l, 3);
  ByteSpan b = e.bytes();
  for (size_t n : {size_t{0}, size_t{10}, size_t{127}, size_t{128}, b.size() / 2, b.size() - 1}) {
    EXPECT_FALSE(decode_block_record(b.first(n)).is_ok()) << n;
  }
  std::vector<uint64_t> longer(e.storage.size() + 2, 0);
  std::memcpy(longer.data(), b.data(), b.size());
  EXPECT_FALSE(decode_block_record({reinterpret_cast<uint8_t*>(longer.data()), b.size() + 8}).is_ok());
  auto meta = peek_block_record(b.first(static_cast<size_t>(record_header_bytes(l.block_size))));
  ASSERT_TRUE(meta.is_ok()) << meta.status().message();
  EXPECT_EQ(meta->block_hash, e.meta.block_hash);
}

TEST(BlockRecord, ForeignRecordsAreRefusedByCheck) {
  const KvLayout l = layout(kernels::KvDType::kF32);
  Encoded e = encode(l, 5);
  auto v = decode_block_record(e.bytes());
  ASSERT_TRUE(v.is_ok());
  EXPECT_FALSE(check_block_record(v->meta, l, KvNamespace{11, 22, 34}, e.meta.block_hash).is_ok());  // salt
  EXPECT_FALSE(check_block_record(v->meta, l, KvNamespace{12, 22, 33}, e.meta.block_hash).is_ok());  // model
  EXPECT_FALSE(check_block_record(v->meta, l, e.meta.ns, e.meta.block_hash + 1).is_ok());
  EXPECT_FALSE(check_block_record(v->meta, layout(kernels::KvDType::kF16), e.meta.ns, e.meta.block_hash).is_ok());
  EXPECT_FALSE(check_block_record(v->meta, layout(kernels::KvDType::kF32, 8), e.meta.ns, e.meta.block_hash).is_ok());
}

TEST(BlockRecord, PoolSegmentsRoundTripThroughARecord) {
  const KvLayout l = layout(kernels::KvDType::kBF16);
  auto pool = BlockPool::create(l, 4);
  ASSERT_TRUE(pool.is_ok());
  std::vector<ByteSpan> src(2 * l.n_layer), dst(2 * l.n_layer);
  pool->block_segments(1, src);
  pool->block_segments(3, dst);
  Rng rng(1);
  for (ByteSpan s : src) {
    for (auto& b : s) b = static_cast<uint8_t>(rng.next_u64());
  }
  BlockRecordMeta meta = record_meta_for(l);
  std::vector<int32_t> tokens(static_cast<size_t>(l.block_size), 5);
  std::vector<ConstByteSpan> gather(src.begin(), src.end());
  std::vector<uint64_t> storage(static_cast<size_t>(record_bytes(meta) + 7) / 8);
  ByteSpan bytes{reinterpret_cast<uint8_t*>(storage.data()), static_cast<size_t>(record_bytes(meta))};
  encode_block_record(meta, tokens, gather, bytes);
  auto v = decode_block_record(bytes);
  ASSERT_TRUE(v.is_ok());
  copy_record_payload(*v, dst);
  for (size_t i = 0; i < src.size(); ++i) {
    ASSERT_EQ(src[i].size(), dst[i].size());
    EXPECT_EQ(std::memcmp(src[i].data(), dst[i].data(), src[i].size()), 0) << "segment " << i;
  }
}

}  // namespace
}  // namespace pagoda::kvcache
