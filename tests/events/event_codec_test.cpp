// KV event batches on the wire: our bytes are exactly the msgpack vLLM's msgspec structs produce
// (written out by hand below, field by field), and our decoder reads what vLLM, SGLang and older
// vLLM send, skipping what it does not know.
#include "events/event_codec.h"

#include <gtest/gtest.h>

#include <cstdio>

namespace pagoda::events {
namespace {

// "a4 74 79 70 65" -> bytes; spaces and |-separated comments ignored.
std::string bytes(const std::string& hex) {
  std::string out;
  std::string digits;
  bool comment = false;
  for (char c : hex) {
    if (c == '|') comment = !comment;
    if (comment || c == '|' || c == ' ' || c == '\n') continue;
    digits += c;
    if (digits.size() == 2) {
      out += static_cast<char>(std::stoi(digits, nullptr, 16));
      digits.clear();
    }
  }
  EXPECT_TRUE(digits.empty()) << "odd number of hex digits";
  return out;
}

std::string str(const std::string& s) {  // a fixstr (s.size() < 32) as hex
  char buf[4];
  std::snprintf(buf, sizeof(buf), "%02x", 0xa0 | static_cast<int>(s.size()));
  std::string out = buf;
  for (unsigned char c : s) {
    std::snprintf(buf, sizeof(buf), "%02x", c);
    out += buf;
  }
  return out + " ";
}

std::string hex_of(const std::string& b) {
  std::string out;
  char buf[4];
  for (unsigned char c : b) {
    std::snprintf(buf, sizeof(buf), "%02x", c);
    out += buf;
  }
  return out;
}

KvEvent stored_event() {
  KvEvent e;
  e.type = KvEventType::kBlockStored;
  e.block_hashes = {1, 0xffffffffffffffffull};
  e.token_ids = {1, 2, 3, 4};
  e.block_size = 2;
  e.medium = "GPU";
  e.extra_keys = {0, 0};
  e.group_idx = 0;
  return e;
}

KvEvent removed_event() {
  KvEvent e;
  e.type = KvEventType::kBlockRemoved;
  e.block_hashes = {300};
  e.medium = "CPU";
  e.group_idx = 0;
  return e;
}

KvEventBatch sample_batch() {
  KvEventBatch b;
  b.ts = 1700000000.5;
  KvEvent cleared;
  cleared.type = KvEventType::kAllBlocksCleared;
  b.events = {stored_event(), removed_event(), cleared};
  b.data_parallel_rank = 0;
  return b;
}

// What msgspec writes for KVEventBatch(ts=1700000000.5, events=[...], data_parallel_rank=0) with
// vLLM's current (tagged-map) event structs: fields in declaration order after "type", those
// with a default omitted when equal to it (kv_cache_spec_kind and kv_cache_spec_sliding_window
// here), those without one always written (lora_id, lora_name as nil).
const std::string kMapBatch =
    "93 |batch array(3)| cb 41d954fc40200000 |ts float64| 93 |events array(3)|"
    "8a |map(10)|" + str("type") + str("BlockStored") +
    str("block_hashes") + "92 01 cf ffffffffffffffff" +
    str("parent_block_hash") + "c0" +
    str("token_ids") + "94 01 02 03 04" +
    str("block_size") + "02" +
    str("lora_id") + "c0" +
    str("medium") + str("GPU") +
    str("lora_name") + "c0" +
    str("extra_keys") + "92 c0 c0" +
    str("group_idx") + "00"
    "84 |map(4)|" + str("type") + str("BlockRemoved") +
    str("block_hashes") + "91 cd 012c |uint16 300|" +
    str("medium") + str("CPU") +
    str("group_idx") + "00"
    "81 |map(1)|" + str("type") + str("AllBlocksCleared") +
    "00 |data_parallel_rank|";

// The legacy encoding (msgspec array_like=True, tag first).
const std::string kArrayBatch =
    "93 cb 41d954fc40200000 93"
    "9a |array(10)|" + str("BlockStored") + "92 01 cf ffffffffffffffff c0 94 01 02 03 04 02 c0" + str("GPU") +
    "c0 92 c0 c0 00"
    "94" + str("BlockRemoved") + "91 cd 012c" + str("CPU") + "00"
    "91" + str("AllBlocksCleared") + "00";

TEST(EventCodec, MapEncodingIsVllmsBytes) {
  EXPECT_EQ(hex_of(encode_batch(sample_batch(), EventEncoding::kMap)), hex_of(bytes(kMapBatch)));
}

TEST(EventCodec, ArrayEncodingIsLegacyVllmsBytes) {
  EXPECT_EQ(hex_of(encode_batch(sample_batch(), EventEncoding::kArray)), hex_of(bytes(kArrayBatch)));
}

TEST(EventCodec, DecodesBothEncodingsBackExactly) {
  for (const std::string& b : {bytes(kMapBatch), bytes(kArrayBatch)}) {
    auto d = decode_batch(b);
    ASSERT_TRUE(d.is_ok()) << d.status().message();
    EXPECT_EQ(*d, sample_batch());
  }
}

TEST(EventCodec, SaltKeysAndParentsAndLongStrings) {
  KvEventBatch b;
  b.ts = 1.25;
  KvEvent e = stored_event();
  e.parent_block_hash = 0x8000000000000000ull;
  e.extra_keys = {7, 7};
  e.medium = std::string(40, 'm');  // str8
  b.events = {e};
  const std::string enc = encode_batch(b, EventEncoding::kMap);
  EXPECT_NE(hex_of(enc).find("b1" + hex_of("parent_block_hash") + "cf8000000000000000"), std::string::npos);
  EXPECT_NE(hex_of(enc).find(hex_of("extra_keys") + "92910791" + "07"), std::string::npos);
  EXPECT_NE(hex_of(enc).find("d928" + hex_of(std::string(40, 'm'))), std::string::npos);
  auto d = decode_batch(enc);
  ASSERT_TRUE(d.is_ok()) << d.status().message();
  EXPECT_EQ(*d, b);  // and no rank: a 2-element batch
  EXPECT_EQ(hex_of(enc).substr(0, 2), "92");
}

// A current vLLM map with fields we do not know (kv_cache_spec_kind, a future "locality"), bytes
// hashes (vLLM's default sha256 digests: the low 64 bits, big-endian), signed hashes (SGLang),
// an event type we do not know, and a batch with an extra trailing element.
TEST(EventCodec, ToleratesWhatOtherEnginesSend) {
  std::string digest_hex = "c4 20 |bin8(32)|";
  for (int i = 0; i < 24; ++i) digest_hex += "aa";
  digest_hex += "0102030405060708";
  const std::string batch =
      "94 cb 3ff4000000000000 93"
      "8c |map(12)|" + str("type") + str("BlockStored") + str("block_hashes") + "92" + digest_hex + "ff |int -1|" +
      str("parent_block_hash") + "d0 80 |int8 -128|" + str("token_ids") + "92 05 06" + str("block_size") + "01" +
      str("lora_id") + "c0" + str("medium") + str("GPU") + str("lora_name") + str("adapter") +
      str("extra_keys") + "92 91" + str("mm-hash") + "c0" + str("group_idx") + "01" +
      str("kv_cache_spec_kind") + str("full_attention") + str("locality") + str("local") +
      "82" + str("type") + str("BlockUpdated") + str("block_hashes") + "90"
      "9c" + str("BlockStored") + "90 c0 90 10 c0 c0 c0 c0 00" + str("full_attention") + "c0 |12 fields|"
      "07 |rank|" + str("extra");
  DecodeInfo info;
  auto d = decode_batch(bytes(batch), &info);
  ASSERT_TRUE(d.is_ok()) << d.status().message();
  EXPECT_EQ(d->ts, 1.25);
  EXPECT_EQ(d->data_parallel_rank, 7);
  EXPECT_EQ(info.unknown_events, 1);  // BlockUpdated skipped
  ASSERT_EQ(d->events.size(), 2u);
  const KvEvent& e = d->events[0];
  EXPECT_EQ(e.block_hashes, (std::vector<uint64_t>{0x0102030405060708ull, 0xffffffffffffffffull}));
  EXPECT_EQ(e.parent_block_hash, static_cast<uint64_t>(-128));
  EXPECT_EQ(e.token_ids, (std::vector<int32_t>{5, 6}));
  EXPECT_EQ(e.lora_name, "adapter");
  EXPECT_EQ(e.extra_keys.size(), 2u);
  EXPECT_EQ(e.group_idx, 1);
  EXPECT_EQ(d->events[1].block_size, 16);
  EXPECT_EQ(d->events[1].group_idx, 0);
}

TEST(EventCodec, MalformedInputIsAnErrorNeverACrash) {
  const std::string good = bytes(kMapBatch);
  for (size_t cut = 0; cut < good.size(); ++cut) {
    EXPECT_FALSE(decode_batch(good.substr(0, cut)).is_ok()) << "cut at " << cut;
  }
  EXPECT_FALSE(decode_batch(good + "00").is_ok());                         // trailing bytes
  EXPECT_FALSE(decode_batch(bytes("91 cb 3ff4000000000000")).is_ok());      // one element
  EXPECT_FALSE(decode_batch(bytes("92" + str("ts") + "90")).is_ok());       // ts not a number
  EXPECT_FALSE(decode_batch(bytes("92 00 80")).is_ok());                    // events not an array
  EXPECT_FALSE(decode_batch(bytes("92 00 91 81" + str("block_hashes") + "90")).is_ok());  // no type
  EXPECT_FALSE(decode_batch(bytes("92 00 91 81" + str("type") + str("BlockStored"))).is_ok());  // no hashes
  EXPECT_FALSE(decode_batch(bytes("92 00 91 82" + str("type") + str("BlockRemoved") + str("block_hashes") + "91 c3")).is_ok());
  EXPECT_FALSE(decode_batch(bytes("92 00 91 92" + str("BlockStored") + "91 ca 3f800000")).is_ok());  // float hash
  EXPECT_FALSE(decode_batch(bytes("92 00 91 94" + str("BlockStored") + "90 c0 91 cf ffffffffffffffff")).is_ok());  // token
  EXPECT_FALSE(decode_batch(bytes("92 00 91 00")).is_ok());                 // event not map/array
  // Claimed sizes far beyond the payload, and nesting beyond any real batch.
  EXPECT_FALSE(decode_batch(bytes("92 00 dd 7fffffff")).is_ok());
  EXPECT_FALSE(decode_batch(bytes("92 00 91 91 91 91 91 91 91 91 91 91 90")).is_ok());
  EXPECT_FALSE(decode_batch(bytes("")).is_ok());
}

}  // namespace
}  // namespace pagoda::events
