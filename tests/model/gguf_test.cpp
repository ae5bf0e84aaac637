#include "model/format/gguf.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <random>

#include "test_data.h"

namespace pagoda::model {
namespace {

constexpr const char* kName = "test.gguf";

std::string stories_gguf() { return pagoda::testing::stories_dir() + "/stories260K.gguf"; }

std::string temp_path(const std::string& leaf) {
  return ::testing::TempDir() + "pagoda_gguf_" + std::to_string(::getpid()) + "_" + leaf;
}

std::vector<uint8_t> random_bytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> out(n);
  for (uint8_t& b : out) b = static_cast<uint8_t>(rng());
  return out;
}

// A file with every value type (nested arrays too) and a tensor of every computed dtype
// plus one K-quant Pagoda only lists.
GgufFile make_sample(uint32_t alignment) {
  GgufFile f;
  f.set("general.architecture", GgufValue::of_string("llama"));
  f.set("general.alignment", GgufValue::of_u32(alignment));
  f.set("v.u8", GgufValue::of_u8(200));
  f.set("v.i8", GgufValue::of_i8(-100));
  f.set("v.u16", GgufValue::of_u16(60000));
  f.set("v.i16", GgufValue::of_i16(-30000));
  f.set("v.u32", GgufValue::of_u32(4000000000u));
  f.set("v.i32", GgufValue::of_i32(-2000000000));
  f.set("v.u64", GgufValue::of_u64(~uint64_t{0}));
  f.set("v.i64", GgufValue::of_i64(-(int64_t{1} << 62)));
  f.set("v.f32", GgufValue::of_f32(1e-5f));
  f.set("v.f64", GgufValue::of_f64(3.25));
  f.set("v.bool", GgufValue::of_bool(true));
  f.set("v.string", GgufValue::of_string(std::string("h\xe2\x96\x81llo\0x", 9)));
  f.set("v.strings", GgufValue::string_array({"a", "", "\xe2\x96\x81z"}));
  f.set("v.f32s", GgufValue::f32_array({1.5f, -2.0f}));
  f.set("v.i32s", GgufValue::i32_array({-1, 2, 3}));
  f.set("v.u8s", GgufValue::numeric_array(GgufType::kUint8, {1, 2, 3}));
  f.set("v.bools", GgufValue::numeric_array(GgufType::kBool, {1, 0}));
  f.set("v.empty", GgufValue::i64_array({}));
  f.set("v.nested", GgufValue::array_of_arrays(
                        {GgufValue::i32_array({7, 8}), GgufValue::string_array({"x"}),
                         GgufValue::array_of_arrays({GgufValue::f32_array({0.5f})})}));
  struct Spec { const char* name; std::vector<int64_t> dims; uint32_t type; };
  const Spec specs[] = {
      {"t.f32", {3, 5}, kGgmlTypeF32},   {"t.f16", {7}, kGgmlTypeF16},
      {"t.bf16", {2, 3, 4}, kGgmlTypeBF16}, {"t.q8_0", {64, 3}, kGgmlTypeQ8_0},
      {"t.q4_0", {32, 2, 1, 2}, kGgmlTypeQ4_0}, {"t.q4_K", {256}, 12},
  };
  uint32_t seed = 1;
  for (const Spec& s : specs) {
    uint64_t bytes = ggml_tensor_bytes(s.dims, s.type).value();
    std::vector<uint8_t> data = random_bytes(bytes, seed++);
    EXPECT_TRUE(f.add_tensor(s.name, s.dims, s.type, data.data(), data.size()).is_ok()) << s.name;
  }
  return f;
}

void expect_same(const GgufFile& a, const GgufFile& b) {
  ASSERT_EQ(a.metadata().size(), b.metadata().size());
  for (size_t i = 0; i < a.metadata().size(); ++i) {
    EXPECT_EQ(a.metadata()[i].first, b.metadata()[i].first);
    EXPECT_TRUE(a.metadata()[i].second == b.metadata()[i].second) << a.metadata()[i].first;
  }
  ASSERT_EQ(a.tensors().size(), b.tensors().size());
  for (size_t i = 0; i < a.tensors().size(); ++i) {
    const GgufTensorInfo& x = a.tensors()[i];
    const GgufTensorInfo& y = b.tensors()[i];
    EXPECT_EQ(x.name, y.name);
    EXPECT_EQ(x.dims, y.dims);
    EXPECT_EQ(x.ggml_type, y.ggml_type);
    EXPECT_EQ(x.dtype, y.dtype);
    ASSERT_EQ(x.bytes, y.bytes);
    EXPECT_EQ(std::memcmp(a.tensor_data(x), b.tensor_data(y), x.bytes), 0) << x.name;
  }
}

Result<GgufFile> parse(const std::vector<uint8_t>& bytes) {
  return GgufFile::parse(bytes.data(), bytes.size(), kName);
}

TEST(GgufRoundTrip, EveryValueTypeAndDtype) {
  for (uint32_t alignment : {32u, 64u, 8u, 1u}) {
    SCOPED_TRACE("alignment " + std::to_string(alignment));
    GgufFile f = make_sample(alignment);
    std::vector<uint8_t> bytes = f.to_bytes();
    auto g = parse(bytes);
    ASSERT_TRUE(g.is_ok()) << g.status().message();
    EXPECT_EQ(g->version(), 3u);
    EXPECT_EQ(g->alignment(), alignment);
    EXPECT_EQ(g->data_offset() % alignment, 0u);
    expect_same(f, *g);
    for (const GgufTensorInfo& t : g->tensors()) {
      EXPECT_EQ(t.offset % alignment, 0u) << t.name;
      EXPECT_EQ(reinterpret_cast<uintptr_t>(g->tensor_data(t)) % 32, 0u) << t.name;
      if (alignment >= 32) {  // data section starts aligned: zero-copy position in the file
        EXPECT_EQ(std::memcmp(g->tensor_data(t), bytes.data() + g->data_offset() + t.offset, t.bytes), 0);
      }
    }
    EXPECT_EQ(bytes.size() % alignment, 0u);  // last tensor padded too
    EXPECT_EQ(g->to_bytes(), bytes);          // re-serialising is byte-identical
  }
}

TEST(GgufRoundTrip, WriteAndReadFile) {
  GgufFile f = make_sample(32);
  const std::string path = temp_path("roundtrip.gguf");
  ASSERT_TRUE(f.write(path).is_ok());
  auto g = GgufFile::read(path);
  ASSERT_TRUE(g.is_ok()) << g.status().message();
  expect_same(f, *g);
  EXPECT_EQ(pagoda::testing::read_file_or_empty(path).size(), f.to_bytes().size());
  auto m = GgufFile::read_metadata_only(path);
  ASSERT_TRUE(m.is_ok()) << m.status().message();
  EXPECT_EQ(m->tensors().size(), f.tensors().size());
  EXPECT_EQ(m->tensor_data(m->tensors()[0]), nullptr);
  EXPECT_FALSE(m->write(path + ".2").is_ok());
  std::remove(path.c_str());
}

TEST(GgufRoundTrip, MetadataOnlyReadsLargeHeaders) {
  GgufFile f;  // a 2.6 MB vocabulary: more than read_metadata_only's first 1 MiB chunk
  std::vector<std::string> tokens(200000);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = "token" + std::to_string(i);
  f.set("tokenizer.ggml.tokens", GgufValue::string_array(tokens));
  std::vector<float> ones(4, 1.0f);
  ASSERT_TRUE(f.add_tensor("w", {4}, kGgmlTypeF32, ones.data(), 16).is_ok());
  const std::string path = temp_path("big_header.gguf");
  ASSERT_TRUE(f.write(path).is_ok());
  auto m = GgufFile::read_metadata_only(path);
  ASSERT_TRUE(m.is_ok()) << m.status().message();
  EXPECT_EQ(*m->get_string_array("tokenizer.ggml.tokens"), tokens);
  EXPECT_EQ(m->tensors()[0].bytes, 16u);
  std::remove(path.c_str());
}

TEST(GgufValues, TypedGetters) {
  GgufFile f = make_sample(32);
  EXPECT_EQ(f.get_int("v.u8"), 200);
  EXPECT_EQ(f.get_int("v.i8"), -100);
  EXPECT_EQ(f.get_int("v.u32"), 4000000000);
  EXPECT_EQ(f.get_int("v.i64"), -(int64_t{1} << 62));
  EXPECT_EQ(f.get_int("v.u64"), std::nullopt);  // does not fit int64
  EXPECT_EQ(f.get_int("v.f32"), std::nullopt);
  EXPECT_EQ(f.get_int("v.bool"), std::nullopt);
  EXPECT_EQ(f.get_int("missing"), std::nullopt);
  EXPECT_FLOAT_EQ(static_cast<float>(*f.get_float("v.f32")), 1e-5f);
  EXPECT_EQ(f.get_float("v.f64"), 3.25);
  EXPECT_EQ(f.get_float("v.i16"), -30000.0);
  EXPECT_EQ(f.get_float("v.string"), std::nullopt);
  EXPECT_EQ(f.get_bool("v.bool"), true);
  EXPECT_EQ(f.get_bool("v.u8"), std::nullopt);
  EXPECT_EQ(f.get_string("general.architecture"), "llama");
  EXPECT_EQ(f.get_string("v.u8"), std::nullopt);
  ASSERT_NE(f.get_string_array("v.strings"), nullptr);
  EXPECT_EQ((*f.get_string_array("v.strings"))[2], "\xe2\x96\x81z");
  EXPECT_EQ(f.get_string_array("v.f32s"), nullptr);
  EXPECT_EQ(f.get_float_array("v.f32s"), (std::vector<float>{1.5f, -2.0f}));
  EXPECT_EQ(f.get_float_array("v.i32s"), (std::vector<float>{-1, 2, 3}));
  EXPECT_EQ(f.get_int_array("v.i32s"), (std::vector<int64_t>{-1, 2, 3}));
  EXPECT_EQ(f.get_int_array("v.u8s"), (std::vector<int64_t>{1, 2, 3}));
  EXPECT_EQ(f.get_int_array("v.f32s"), std::nullopt);
  EXPECT_EQ(f.get_int_array("v.strings"), std::nullopt);
  const GgufValue* nested = f.find("v.nested");
  ASSERT_NE(nested, nullptr);
  ASSERT_EQ(nested->array_size(), 3u);
  EXPECT_EQ((*nested->as_array_array())[0].to_int_array(), (std::vector<int64_t>{7, 8}));
  EXPECT_EQ(nested->to_display_string(), "[array x 3: [i32 x 2: 7, 8], [string x 1: \"x\"], [array x 1: [f32 x 1: 0.5]]]");
  EXPECT_EQ(f.find("v.u16")->to_display_string(), "60000");
}

TEST(GgufValues, SetReplacesInPlaceAndEraseRemoves) {
  GgufFile f;
  f.set("a", GgufValue::of_u32(1));
  f.set("b", GgufValue::of_string("x"));
  f.set("a", GgufValue::of_f32(2.0f));
  ASSERT_EQ(f.metadata().size(), 2u);
  EXPECT_EQ(f.metadata()[0].first, "a");
  EXPECT_EQ(f.get_float("a"), 2.0);
  EXPECT_TRUE(f.erase("a"));
  EXPECT_FALSE(f.erase("a"));
  EXPECT_EQ(f.find("a"), nullptr);
  EXPECT_EQ(f.get_string("b"), "x");
  f.set("general.alignment", GgufValue::of_u32(128));
  EXPECT_EQ(f.alignment(), 128u);
}

TEST(GgufTensors, AddTensorChecksItsArguments) {
  GgufFile f;
  std::vector<uint8_t> buf(4096);
  EXPECT_TRUE(f.add_tensor("a", {4, 2}, kGgmlTypeF32, buf.data(), 32).is_ok());
  auto expect_bad = [&](const std::string& name, std::vector<int64_t> dims, uint32_t type, size_t bytes,
                        const std::string& want) {
    Status s = f.add_tensor(name, std::move(dims), type, buf.data(), bytes);
    EXPECT_FALSE(s.is_ok()) << name;
    EXPECT_NE(s.message().find(want), std::string::npos) << s.message();
  };
  expect_bad("a", {4}, kGgmlTypeF32, 16, "already present");
  expect_bad("", {4}, kGgmlTypeF32, 16, "empty");
  expect_bad("b", {4}, kGgmlTypeF32, 12, "12 bytes given, 16 expected");
  expect_bad("b", {33}, kGgmlTypeQ8_0, 34, "not a multiple of the q8_0 block size 32");
  expect_bad("b", {1, 1, 1, 1, 1}, kGgmlTypeF32, 4, "5 dimensions");
  expect_bad("b", {4, 0}, kGgmlTypeF32, 0, "dimension 1 is 0");
  expect_bad("b", {4}, 99, 16, "unknown ggml tensor type 99");
  expect_bad("b", {int64_t{1} << 40, int64_t{1} << 40}, kGgmlTypeF32, 4, "overflows");
  EXPECT_EQ(f.tensors().size(), 1u);
}

TEST(GgufTypes, KnowsEveryGgmlBlockSize) {
  EXPECT_STREQ(ggml_type_name(12), "q4_K");
  EXPECT_STREQ(ggml_type_name(30), "bf16");
  EXPECT_STREQ(ggml_type_name(99), "type_99");
  EXPECT_EQ(ggml_type_info(4), nullptr);  // removed Q4_2
  EXPECT_EQ(ggml_type_info(40), nullptr);
  struct Want { uint32_t id; int elems, bytes; };
  for (Want w : {Want{0, 1, 4}, {2, 32, 18}, {8, 32, 34}, {10, 256, 84}, {14, 256, 210}, {15, 256, 292},
                 {16, 256, 66}, {19, 256, 50}, {23, 256, 136}, {29, 256, 56}, {34, 256, 54}, {39, 32, 17}}) {
    ASSERT_NE(ggml_type_info(w.id), nullptr) << w.id;
    EXPECT_EQ(ggml_type_info(w.id)->block_elems, w.elems) << w.id;
    EXPECT_EQ(ggml_type_info(w.id)->block_bytes, w.bytes) << w.id;
  }
  for (DType d : {DType::kF32, DType::kF16, DType::kBF16, DType::kQ8_0, DType::kQ4_0}) {
    uint32_t id = ggml_type_from_dtype(d);
    EXPECT_EQ(dtype_from_ggml_type(id), d);
    EXPECT_EQ(ggml_type_info(id)->block_bytes, dtype_info(d).block_bytes);
    EXPECT_EQ(ggml_type_info(id)->name, dtype_name(d));
  }
}

TEST(GgufReal, Stories260KParses) {
  auto f = GgufFile::read(stories_gguf());
  ASSERT_TRUE(f.is_ok()) << f.status().message();
  EXPECT_EQ(f->version(), 3u);
  EXPECT_EQ(f->alignment(), 32u);
  ASSERT_EQ(f->tensors().size(), 48u);
  for (const GgufTensorInfo& t : f->tensors()) {
    EXPECT_EQ(t.ggml_type, kGgmlTypeF32) << t.name;
    EXPECT_EQ(t.dtype, DType::kF32);
    EXPECT_EQ(t.bytes, static_cast<uint64_t>(t.num_elements()) * 4);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(f->tensor_data(t)) % 32, 0u);
  }
  EXPECT_EQ(f->find_tensor("token_embd.weight")->dims, (std::vector<int64_t>{64, 512}));
  EXPECT_EQ(f->find_tensor("blk.4.attn_k.weight")->dims, (std::vector<int64_t>{64, 32}));
  EXPECT_EQ(f->find_tensor("blk.0.ffn_down.weight")->dims, (std::vector<int64_t>{172, 64}));
  EXPECT_EQ(f->find_tensor("nope"), nullptr);
  EXPECT_EQ(f->get_string("general.architecture"), "llama");
  EXPECT_EQ(f->get_string("tokenizer.ggml.model"), "llama");
  EXPECT_EQ(f->get_int("llama.context_length"), 2048);
  EXPECT_EQ(f->get_int("llama.embedding_length"), 64);
  EXPECT_EQ(f->get_int("llama.feed_forward_length"), 172);
  EXPECT_EQ(f->get_int("llama.block_count"), 5);
  EXPECT_EQ(f->get_int("llama.attention.head_count"), 8);
  EXPECT_EQ(f->get_int("llama.attention.head_count_kv"), 4);
  EXPECT_EQ(f->get_int("llama.rope.dimension_count"), 8);
  EXPECT_FLOAT_EQ(static_cast<float>(*f->get_float("llama.attention.layer_norm_rms_epsilon")), 1e-5f);
  EXPECT_EQ(f->get_int("tokenizer.ggml.bos_token_id"), 1);
  EXPECT_EQ(f->get_int("tokenizer.ggml.eos_token_id"), 2);
  EXPECT_EQ(f->get_int("tokenizer.ggml.unknown_token_id"), 0);
  const std::vector<std::string>* tokens = f->get_string_array("tokenizer.ggml.tokens");
  ASSERT_NE(tokens, nullptr);
  ASSERT_EQ(tokens->size(), 512u);
  EXPECT_EQ((*tokens)[1], "<s>");
  EXPECT_EQ((*tokens)[3], "<0x00>");
  auto types = f->get_int_array("tokenizer.ggml.token_type");
  ASSERT_TRUE(types.has_value());
  int counts[7] = {};
  for (int64_t t : *types) counts[t]++;
  EXPECT_EQ(counts[1], 253);
  EXPECT_EQ(counts[2], 1);
  EXPECT_EQ(counts[3], 2);
  EXPECT_EQ(counts[6], 256);
  EXPECT_EQ(f->get_float_array("tokenizer.ggml.scores")->size(), 512u);
  // Our writer lays the file out exactly as llama.cpp's did.
  const std::string original = pagoda::testing::read_file_or_empty(stories_gguf());
  EXPECT_TRUE(f->to_bytes() == std::vector<uint8_t>(original.begin(), original.end()));
  auto m = GgufFile::read_metadata_only(stories_gguf());
  ASSERT_TRUE(m.is_ok()) << m.status().message();
  EXPECT_EQ(m->tensors().size(), 48u);
  EXPECT_EQ(m->metadata().size(), f->metadata().size());
}

TEST(GgufReal, MissingFileNamesThePath) {
  auto f = GgufFile::read("/nonexistent/dir/model.gguf");
  ASSERT_FALSE(f.is_ok());
  EXPECT_NE(f.status().message().find("/nonexistent/dir/model.gguf: cannot open"), std::string::npos);
}

// ---- corrupt, truncated and hostile files ----

// Little-endian byte builder for hand-made files.
struct Bytes {
  std::vector<uint8_t> b;
  Bytes& raw(const void* p, size_t n) {
    const auto* c = static_cast<const uint8_t*>(p);
    b.insert(b.end(), c, c + n);
    return *this;
  }
  Bytes& u32(uint32_t v) { return raw(&v, 4); }
  Bytes& u64(uint64_t v) { return raw(&v, 8); }
  Bytes& str(const std::string& s) { return u64(s.size()).raw(s.data(), s.size()); }
  Bytes& header(uint64_t tensors, uint64_t kvs, uint32_t version = 3) {
    return raw("GGUF", 4).u32(version).u64(tensors).u64(kvs);
  }
  Bytes& kv_u32(const std::string& key, uint32_t v) { return str(key).u32(4).u32(v); }
  Bytes& tensor(const std::string& name, std::vector<uint64_t> dims, uint32_t type, uint64_t offset) {
    str(name).u32(static_cast<uint32_t>(dims.size()));
    for (uint64_t d : dims) u64(d);
    return u32(type).u64(offset);
  }
  Bytes& data(size_t alignment, size_t n) {  // pad, then n data bytes
    while (b.size() % alignment != 0) b.push_back(0);
    b.resize(b.size() + n, 0x11);
    return *this;
  }
};

void expect_error(const std::vector<uint8_t>& bytes, const std::string& want) {
  auto f = parse(bytes);
  ASSERT_FALSE(f.is_ok()) << "expected an error mentioning: " << want;
  const std::string& msg = f.status().message();
  EXPECT_EQ(msg.rfind(std::string(kName) + ": ", 0), 0u) << msg;
  EXPECT_NE(msg.find(want), std::string::npos) << "message: " << msg << "\nwanted: " << want;
}

// A valid two-tensor file, built by hand, with variations.
std::vector<uint8_t> two_tensors(uint64_t offset_b, uint32_t alignment_kv = 0) {
  Bytes x;
  x.header(2, alignment_kv != 0 ? 2 : 1).kv_u32("a", 7);
  if (alignment_kv != 0) x.kv_u32("general.alignment", alignment_kv);
  x.tensor("ta", {8}, kGgmlTypeF32, 0).tensor("tb", {8}, kGgmlTypeF32, offset_b);
  return x.data(32, 64 + 32).b;
}

TEST(GgufCorrupt, HandMadeBaseFileIsValid) {
  auto f = parse(two_tensors(32));
  ASSERT_TRUE(f.is_ok()) << f.status().message();
  EXPECT_EQ(f->get_int("a"), 7);
  EXPECT_EQ(f->tensors()[1].offset, 32u);
}

TEST(GgufCorrupt, HeaderFields) {
  expect_error({'G', 'G'}, "too small");
  expect_error(Bytes().raw("GGML", 4).u32(3).u64(0).u64(0).b, "not a GGUF file");
  expect_error(Bytes().header(0, 0, 1).b, "version 1 is not supported");
  expect_error(Bytes().header(0, 0, 7).b, "unsupported GGUF version 7");
  expect_error(Bytes().header(0, 0, 0x03000000).b, "big-endian");
  expect_error(Bytes().header(uint64_t{1} << 60, 0).b, "tensor_count = 1152921504606846976");
  expect_error(Bytes().header(0, uint64_t{1} << 60).b, "kv_count = 1152921504606846976");
  expect_error(Bytes().header(0, 1).u64(~uint64_t{0}).u64(0).b, "past the end of the file");
  EXPECT_TRUE(parse(Bytes().header(0, 0, 2).b).is_ok());  // v2, empty
}

TEST(GgufCorrupt, MetadataValues) {
  expect_error(Bytes().header(0, 1).str("k").u32(13).u32(0).b, "unknown value type 13");
  expect_error(Bytes().header(0, 1).str("k").u32(8).u64(uint64_t{1} << 62).b, "string value of 'k'");
  expect_error(Bytes().header(0, 1).str("k").u32(9).u32(99).u64(1).b, "unknown element type 99");
  expect_error(Bytes().header(0, 1).str("k").u32(9).u32(6).u64(uint64_t{1} << 61).u32(0).b, "claims");
  expect_error(Bytes().header(0, 1).str("k").u32(9).u32(8).u64(1000).u64(1).b, "claims");
  expect_error(Bytes().header(0, 1).str("k").u32(9).u32(8).u64(2).str("x").u64(99).b,
               "element 1 of array 'k'");
  expect_error(Bytes().header(0, 2).kv_u32("k", 1).kv_u32("k", 2).b, "duplicate metadata key 'k'");
  expect_error(Bytes().header(0, 1).str("").u32(4).u32(0).b, "empty key");
  // Arrays of arrays: 9 levels is too deep, 3 levels are fine.
  Bytes deep;
  deep.header(0, 1).str("k").u32(9);
  for (int i = 0; i < 9; ++i) deep.u32(9).u64(1);
  deep.u32(4).u64(0);
  expect_error(deep.b, "deeper than");
  Bytes ok;
  ok.header(0, 1).str("k").u32(9).u32(9).u64(1).u32(9).u64(1).u32(4).u64(1).u32(42);
  auto f = parse(ok.b);
  ASSERT_TRUE(f.is_ok()) << f.status().message();
  EXPECT_EQ(f->find("k")->to_display_string(), "[array x 1: [array x 1: [u32 x 1: 42]]]");
}

TEST(GgufCorrupt, Alignment) {
  expect_error(two_tensors(32, 0x7fffffff), "not a power of two");
  Bytes zero;
  zero.header(0, 1).kv_u32("general.alignment", 0);
  expect_error(zero.b, "general.alignment = 0");
  Bytes three;
  three.header(0, 1).kv_u32("general.alignment", 3);
  expect_error(three.b, "general.alignment = 3 at byte 53 is not a power of two");
  expect_error(Bytes().header(0, 1).str("general.alignment").u32(5).u32(32).b, "expected u32");
  expect_error(two_tensors(32, 64), "data offset 32 at byte");  // 32 is not a multiple of 64
}

TEST(GgufCorrupt, TensorInfos) {
  auto one = [](std::vector<uint64_t> dims, uint32_t type, uint64_t offset, size_t data) {
    return Bytes().header(1, 0).tensor("t", std::move(dims), type, offset).data(32, data).b;
  };
  EXPECT_TRUE(parse(one({8}, 0, 0, 32)).is_ok());
  expect_error(one({1, 1, 1, 1, 1}, 0, 0, 32), "tensor 't': n_dims = 5");
  expect_error(Bytes().header(1, 0).str("t").u32(0).u32(0).u64(0).u64(0).u64(0).b, "n_dims = 0");
  expect_error(one({8, 0}, 0, 0, 32), "dimension 1 is 0");
  expect_error(one({8, uint64_t{1} << 63}, 0, 0, 32), "dimension 1 is 9223372036854775808");
  expect_error(one({uint64_t{1} << 40, uint64_t{1} << 40}, 0, 0, 32), "overflows");
  expect_error(one({8}, 99, 0, 32), "tensor 't': unknown ggml type 99");
  expect_error(one({8}, 4, 0, 32), "unknown ggml type 4");  // removed from ggml
  expect_error(one({33}, kGgmlTypeQ8_0, 0, 64), "not a multiple of the q8_0 block size 32");
  expect_error(one({8}, 0, 4, 64), "data offset 4 at byte");
  expect_error(one({8}, 0, 32, 32), "runs past the end of the file");
  expect_error(one({8}, 0, uint64_t{1} << 62, 32), "runs past the end of the file");
  expect_error(one({8}, 0, ~uint64_t{31}, 32), "runs past the end of the file");
  expect_error(Bytes().header(1, 0).tensor("", {8}, 0, 0).data(32, 32).b, "empty name");
  expect_error(Bytes().header(2, 0).tensor("t", {8}, 0, 0).tensor("t", {8}, 0, 32).data(32, 64).b,
               "duplicate tensor name 't'");
  expect_error(two_tensors(0), "tensors 'ta' [0, 32) and 'tb' [0, 32) overlap");
  expect_error(Bytes().header(2, 0).tensor("a", {16}, 0, 0).tensor("b", {8}, 0, 32).data(32, 96).b,
               "overlap");
  expect_error(Bytes().header(1, 0).tensor("t", {8}, 0, 0).b, "data section starts at byte");
}

// Every truncation of the header must fail cleanly, and so must cuts in the tensor data.
void expect_truncations_fail(const std::vector<uint8_t>& bytes, size_t header_end, size_t data_end,
                             size_t data_step) {
  for (size_t cut = 0; cut < data_end; cut = cut < header_end ? cut + 1 : cut + data_step) {
    auto f = GgufFile::parse(bytes.data(), cut, kName);
    ASSERT_FALSE(f.is_ok()) << "cut at " << cut;
    ASSERT_EQ(f.status().message().rfind(std::string(kName) + ": ", 0), 0u) << f.status().message();
  }
  EXPECT_TRUE(GgufFile::parse(bytes.data(), data_end, kName).is_ok());  // only padding is missing
}

TEST(GgufCorrupt, TruncationAtEveryHeaderByte) {
  GgufFile sample = make_sample(32);
  std::vector<uint8_t> bytes = sample.to_bytes();
  auto f = parse(bytes);
  ASSERT_TRUE(f.is_ok());
  const GgufTensorInfo& last = f->tensors().back();
  expect_truncations_fail(bytes, f->data_offset(), f->data_offset() + last.offset + last.bytes, 7);

  std::string real = pagoda::testing::read_file_or_empty(stories_gguf());
  std::vector<uint8_t> real_bytes(real.begin(), real.end());
  auto g = parse(real_bytes);
  ASSERT_TRUE(g.is_ok()) << g.status().message();
  uint64_t end = 0;
  for (const GgufTensorInfo& t : g->tensors()) end = std::max(end, t.offset + t.bytes);
  expect_truncations_fail(real_bytes, g->data_offset(), g->data_offset() + end, 4099);
}

TEST(GgufCorrupt, OverwrittenFieldsOfTheRealFile) {
  std::string real = pagoda::testing::read_file_or_empty(stories_gguf());
  const std::vector<uint8_t> good(real.begin(), real.end());
  ASSERT_GT(good.size(), 100000u);
  auto patched = [&](size_t pos, uint64_t value, size_t width) {
    std::vector<uint8_t> b = good;
    std::memcpy(b.data() + pos, &value, width);
    return b;
  };
  expect_error(patched(8, uint64_t{1} << 60, 8), "tensor_count");
  expect_error(patched(16, uint64_t{1} << 60, 8), "kv_count");
  expect_error(patched(24, uint64_t{1} << 62, 8), "the length of the key of metadata entry #0");
  // First key: "tokenizer.ggml.tokens" (array of 512 strings).
  const size_t type_pos = 24 + 8 + std::strlen("tokenizer.ggml.tokens");
  expect_error(patched(type_pos, 77, 4), "unknown value type 77");
  expect_error(patched(type_pos + 4, 9, 4), "array 'tokenizer.ggml.tokens[]'");  // strings read as arrays
  expect_error(patched(type_pos + 8, uint64_t{1} << 59, 8), "claims");
  expect_error(patched(type_pos + 16, uint64_t{1} << 40, 8), "element 0 of array 'tokenizer.ggml.tokens'");
  // The first tensor info: "token_embd.weight".
  const std::string name = "token_embd.weight";
  size_t name_pos = std::string_view(real).find(name);
  ASSERT_NE(name_pos, std::string::npos);
  const size_t n_dims = name_pos + name.size();
  expect_error(patched(n_dims, 5, 4), "tensor 'token_embd.weight': n_dims = 5");
  expect_error(patched(n_dims + 4, 0, 8), "dimension 0 is 0");
  expect_error(patched(n_dims + 12, 100000, 8), "runs past the end");  // 64 x 100000 floats
  expect_error(patched(n_dims + 20, 123, 4), "unknown ggml type 123");
  expect_error(patched(n_dims + 24, 16, 8), "not a multiple of the alignment 32");
  expect_error(patched(n_dims + 24, uint64_t{1} << 40, 8), "runs past the end");
  expect_error(patched(n_dims + 24, 32, 8), "overlap");
}

TEST(GgufCorrupt, RandomMutationsNeverCrash) {
  std::vector<uint8_t> base = make_sample(32).to_bytes();
  std::string real = pagoda::testing::read_file_or_empty(stories_gguf());
  std::vector<uint8_t> real_head(real.begin(), real.begin() + std::min<size_t>(real.size(), 16384));
  std::mt19937 rng(20240601);
  int parsed_ok = 0;
  for (int iter = 0; iter < 4000; ++iter) {
    std::vector<uint8_t> b = iter % 4 == 3 ? real_head : base;
    int n = 1 + static_cast<int>(rng() % 4);
    for (int i = 0; i < n; ++i) {
      size_t pos = rng() % 3 == 0 ? rng() % b.size() : rng() % std::min<size_t>(b.size(), 1024);
      switch (rng() % 4) {
        case 0: b[pos] = static_cast<uint8_t>(rng()); break;
        case 1: b[pos] ^= static_cast<uint8_t>(1u << (rng() % 8)); break;
        case 2: b[pos] = 0xff; break;
        default: b.resize(pos); break;
      }
      if (b.empty()) break;
    }
    auto f = GgufFile::parse(b.data(), b.size(), kName);
    if (!f.is_ok()) {
      EXPECT_FALSE(f.status().message().empty());
      continue;
    }
    ++parsed_ok;
    uint64_t sum = 0;  // touch everything a parsed file exposes
    for (const auto& [key, value] : f->metadata()) sum += value.to_display_string(1000).size();
    for (const GgufTensorInfo& t : f->tensors()) {
      const uint8_t* p = f->tensor_data(t);
      for (uint64_t i = 0; i < t.bytes; i += 61) sum += p[i];
      sum += p[t.bytes - 1];
    }
    EXPECT_GT(sum, 0u);
  }
  EXPECT_GT(parsed_ok, 50);  // many mutations hit data bytes and still parse
}

}  // namespace
}  // namespace pagoda::model
