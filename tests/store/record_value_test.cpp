#include "store/record_value.h"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "core/rng.h"

namespace pagoda::store {
namespace {

// f16-like data: random mantissas under a few exponents, the shape of real KV.
std::vector<uint8_t> kv_like(int64_t n, uint64_t seed) {
  Rng rng(seed);
  std::vector<uint8_t> v(static_cast<size_t>(n));
  for (int64_t i = 0; i + 1 < n; i += 2) {
    v[i] = static_cast<uint8_t>(rng.next_u64());
    v[i + 1] = static_cast<uint8_t>(0x38 + rng.next_u64() % 4);
  }
  std::memcpy(v.data(), &kvcache::kBlockRecordMagic, 4);  // looks like a record to decode()
  return v;
}

TEST(RecordValue, ShuffleInverts) {
  for (int elem : {2, 4}) {
    for (int64_t n : {0, 1, 7, 64, 1001}) {
      std::vector<uint8_t> in = kv_like(std::max<int64_t>(n, 4), 3);
      in.resize(static_cast<size_t>(n));
      std::vector<uint8_t> mid(in.size()), back(in.size());
      shuffle_bytes(in.data(), mid.data(), n, elem);
      unshuffle_bytes(mid.data(), back.data(), n, elem);
      EXPECT_EQ(back, in) << elem << " " << n;
    }
  }
}

TEST(RecordValue, EveryCodecRoundTrips) {
  const std::vector<uint8_t> record = kv_like(64 * 1024 + 6, 5);
  for (RedisCompression c : {RedisCompression::kNone, RedisCompression::kLz4, RedisCompression::kZstd}) {
    for (int shuffle : {0, 2, 4}) {
      RecordValueCodec codec(c, 0, shuffle);
      RecordScratch value, out;
      const kvcache::ConstByteSpan v = codec.encode(record, value);
      if (c == RedisCompression::kNone) {
        EXPECT_EQ(v.data(), record.data());  // the record itself, no copy
      } else if (shuffle == 2) {             // the exponent plane compresses
        EXPECT_LT(v.size(), record.size()) << redis_compression_name(c) << " shuffle " << shuffle;
      } else {                               // never larger: incompressible stays plain
        EXPECT_LE(v.size(), record.size()) << redis_compression_name(c) << " shuffle " << shuffle;
      }
      RecordValueCodec reader(RedisCompression::kNone, 0, 0);  // reads every form
      auto back = reader.decode(v, static_cast<int64_t>(record.size()), out);
      ASSERT_TRUE(back.is_ok()) << back.status().message();
      ASSERT_EQ(back->size(), record.size());
      EXPECT_EQ(std::memcmp(back->data(), record.data(), record.size()), 0);
      EXPECT_EQ(reinterpret_cast<uintptr_t>(back->data()) % 4, 0u);
    }
  }
}

TEST(RecordValue, ShuffleHelpsKvData) {
  const std::vector<uint8_t> record = kv_like(256 * 1024, 9);
  RecordScratch a, b;
  RecordValueCodec plain(RedisCompression::kZstd, 1, 0), shuffled(RedisCompression::kZstd, 1, 2);
  EXPECT_LT(shuffled.encode(record, b).size(), plain.encode(record, a).size());
}

TEST(RecordValue, IncompressibleRecordsStayPlain) {
  std::vector<uint8_t> noise(8192);
  Rng rng(1);
  for (auto& b : noise) b = static_cast<uint8_t>(rng.next_u64());
  std::memcpy(noise.data(), &kvcache::kBlockRecordMagic, 4);
  RecordValueCodec codec(RedisCompression::kLz4, 0, 0);
  RecordScratch value;
  EXPECT_EQ(codec.encode(noise, value).data(), noise.data());
}

TEST(RecordValue, HostileValuesAreErrors) {
  const std::vector<uint8_t> record = kv_like(4096, 11);
  RecordValueCodec codec(RedisCompression::kLz4, 0, 2);
  RecordScratch value, out;
  const kvcache::ConstByteSpan v = codec.encode(record, value);
  std::vector<uint8_t> good(v.begin(), v.end());
  const int64_t n = static_cast<int64_t>(record.size());
  const auto decode = [&](std::vector<uint8_t> bytes, int64_t expect) { return codec.decode(bytes, expect, out); };
  EXPECT_TRUE(decode(good, n).is_ok());
  EXPECT_FALSE(decode(good, n + 64).is_ok());                       // another pool's size
  EXPECT_FALSE(decode({good.begin(), good.begin() + 10}, n).is_ok());  // truncated envelope
  EXPECT_FALSE(decode({good.begin(), good.end() - 7}, n).is_ok());     // truncated data
  EXPECT_FALSE(decode({1, 2}, n).is_ok());
  EXPECT_FALSE(decode({'j', 'u', 'n', 'k', 0, 0, 0, 0}, n).is_ok());
  std::vector<uint8_t> bad = good;
  bad[4] = 9;  // unknown codec
  EXPECT_FALSE(decode(bad, n).is_ok());
  bad = good;
  bad[5] = 3;  // unknown shuffle
  EXPECT_FALSE(decode(bad, n).is_ok());
  bad = good;
  bad[6] = 1;
  EXPECT_FALSE(decode(bad, n).is_ok());
  // Flipped compressed bytes either fail or inflate to other bytes, which the record's checksum
  // catches (decode_block_record); they never overrun.
  for (size_t i = kRecordEnvelopeBytes; i < good.size(); i += 37) {
    bad = good;
    bad[i] ^= 0x5a;
    auto r = decode(bad, n);
    if (r.is_ok()) {
      EXPECT_EQ(r->size(), record.size());
    }
  }
  // A plain record at an odd address is copied to an aligned one.
  std::vector<uint8_t> shifted(record.size() + 1);
  std::memcpy(shifted.data() + 1, record.data(), record.size());
  auto r = codec.decode({shifted.data() + 1, record.size()}, n, out);
  ASSERT_TRUE(r.is_ok());
  EXPECT_EQ(reinterpret_cast<uintptr_t>(r->data()) % 4, 0u);
  EXPECT_EQ(std::memcmp(r->data(), record.data(), record.size()), 0);
}

}  // namespace
}  // namespace pagoda::store
