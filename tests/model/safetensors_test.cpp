// Safetensors reading: a well-formed file maps and reads back, and a table of lying headers
// each gives a clear error (never a crash; `make test` runs them under ASan/UBSan).
#include "model/format/safetensors.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>

#include "hf_writer.h"

namespace pagoda::model {
namespace {

using testing::safetensors_bytes;
using testing::StTensor;

std::string temp_path(const std::string& name) {
  const auto dir = std::filesystem::temp_directory_path() / ("pagoda-st-test-" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  return (dir / name).string();
}

// A file whose header is `json` (as given, space padded) followed by `data_bytes` bytes.
std::vector<uint8_t> with_header(const std::string& json, size_t data_bytes) {
  std::vector<uint8_t> out(8);
  const uint64_t n = json.size();
  for (int i = 0; i < 8; ++i) out[i] = static_cast<uint8_t>(n >> (8 * i));
  out.insert(out.end(), json.begin(), json.end());
  out.resize(out.size() + data_bytes, 0x5a);
  return out;
}

TEST(Safetensors, ReadsTensorsMetadataAndDataInPlace) {
  const std::vector<float> a = {1.5f, -2.0f, 3.25f, 0.0f, 7.0f, -0.5f};
  const std::vector<StTensor> tensors = {
      {"a", "F32", {2, 3}, testing::encode(a, "F32")},
      {"b", "BF16", {3}, testing::encode({1.0f, 2.0f, -4.0f}, "BF16")},
      {"empty", "F16", {0, 4}, {}},
      {"ids", "I64", {2}, std::vector<uint8_t>(16, 1)},
  };
  const std::string path = temp_path("ok.safetensors");
  testing::write_bytes(path, safetensors_bytes(tensors, {{"format", "pt"}}));
  auto f = SafetensorsFile::open(path);
  ASSERT_TRUE(f.is_ok()) << f.status().message();
  ASSERT_EQ(f->tensors().size(), 4u);
  EXPECT_EQ(f->metadata().at("format"), "pt");
  const SafetensorsTensor* ta = f->find("a");
  ASSERT_NE(ta, nullptr);
  EXPECT_EQ(ta->shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(ta->dtype, DType::kF32);
  std::vector<float> back(6);
  std::memcpy(back.data(), f->tensor_data(*ta), 24);
  EXPECT_EQ(back, a);
  const SafetensorsTensor* tb = f->find("b");
  ASSERT_NE(tb, nullptr);
  EXPECT_EQ(tb->dtype, DType::kBF16);
  uint16_t h;
  std::memcpy(&h, f->tensor_data(*tb) + 4, 2);
  EXPECT_EQ(bf16_to_fp32(h), -4.0f);
  EXPECT_EQ(f->find("empty")->num_elements(), 0);
  EXPECT_FALSE(f->find("ids")->dtype.has_value());  // known, but not computed with
  EXPECT_EQ(f->find("ids")->dtype_name, "I64");
  EXPECT_EQ(f->find("missing"), nullptr);
}

TEST(Safetensors, LyingHeadersGiveErrors) {
  struct Case {
    const char* label;
    std::vector<uint8_t> bytes;
    const char* expect;  // in the message
  };
  std::vector<uint8_t> huge_len = with_header("{}", 0);
  for (int i = 0; i < 8; ++i) huge_len[i] = 0xff;
  std::vector<uint8_t> past_file = with_header("{}", 0);
  past_file[0] = 200;
  const std::vector<Case> cases = {
      {"empty file", {}, "shorter than the 8-byte header length"},
      {"5 bytes", {1, 0, 0, 0, 0}, "shorter than the 8-byte header length"},
      {"header length 2^64-1", huge_len, "does not fit the file"},
      {"header length past the file", past_file, "does not fit the file"},
      {"not JSON", with_header("{\"a\": ", 0), "not valid JSON"},
      {"JSON array", with_header("[1, 2]", 0), "not a JSON object"},
      {"entry not an object", with_header(R"({"a": 3})", 0), "tensor 'a' is not an object"},
      {"no dtype", with_header(R"({"a": {"shape": [1], "data_offsets": [0, 4]}})", 4), "no string 'dtype'"},
      {"unknown dtype", with_header(R"({"a": {"dtype": "F7", "shape": [1], "data_offsets": [0, 4]}})", 4), "unknown dtype 'F7'"},
      {"no shape", with_header(R"({"a": {"dtype": "F32", "data_offsets": [0, 4]}})", 4), "no array 'shape'"},
      {"negative dim", with_header(R"({"a": {"dtype": "F32", "shape": [-1], "data_offsets": [0, 4]}})", 4), "not a non-negative integer"},
      {"float dim", with_header(R"({"a": {"dtype": "F32", "shape": [1.5], "data_offsets": [0, 4]}})", 4), "not a non-negative integer"},
      {"one offset", with_header(R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0]}})", 4), "data_offsets"},
      {"negative offset", with_header(R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [-4, 0]}})", 4), "data_offsets"},
      {"string offset", with_header(R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": ["0", 4]}})", 4), "data_offsets"},
      {"end before begin", with_header(R"({"a": {"dtype": "F32", "shape": [0], "data_offsets": [8, 4]}})", 8), "ends before it begins"},
      {"wrong dtype size", with_header(R"({"a": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 12]}})", 12), "need 24 bytes, but data_offsets span 12"},
      {"bf16 sized as f32", with_header(R"({"a": {"dtype": "BF16", "shape": [4], "data_offsets": [0, 16]}})", 16), "need 8 bytes"},
      {"element count overflow", with_header(R"({"a": {"dtype": "F64", "shape": [4294967296, 4294967296], "data_offsets": [0, 0]}})", 0), "too large"},
      {"bytes overflow", with_header(R"({"a": {"dtype": "F64", "shape": [4611686018427387904], "data_offsets": [0, 0]}})", 0), "too large"},
      {"offsets past the end", with_header(R"({"a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}})", 12), "run past the end of the data area (12 bytes)"},
      {"huge offsets", with_header(R"({"a": {"dtype": "U8", "shape": [1], "data_offsets": [18446744073709551614, 18446744073709551615]}})", 4), "run past the end"},
      {"overlapping", with_header(R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},)"
                                  R"( "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}})", 12), "overlap"},
      {"contained", with_header(R"({"a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]},)"
                                R"( "b": {"dtype": "U8", "shape": [1], "data_offsets": [15, 16]},)"
                                R"( "c": {"dtype": "U8", "shape": [1], "data_offsets": [3, 4]}})", 16), "overlap"},
      {"metadata not an object", with_header(R"({"__metadata__": [1]})", 0), "__metadata__ is not an object"},
      {"metadata value not a string", with_header(R"({"__metadata__": {"format": 1}})", 0), "is not a string"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.label);
    auto parsed = parse_safetensors_header(c.bytes.data(), c.bytes.size(), "x.safetensors");
    ASSERT_FALSE(parsed.is_ok());
    EXPECT_NE(parsed.status().message().find("x.safetensors: bad safetensors header"), std::string::npos)
        << parsed.status().message();
    EXPECT_NE(parsed.status().message().find(c.expect), std::string::npos) << parsed.status().message();
    // The same through a mapped file.
    const std::string path = temp_path("bad.safetensors");
    testing::write_bytes(path, c.bytes);
    EXPECT_FALSE(SafetensorsFile::open(path).is_ok());
  }
}

TEST(Safetensors, EmptyTensorsMayShareOffsetsAndHolesAreAllowed) {
  const auto bytes = with_header(R"({"a": {"dtype": "F32", "shape": [0], "data_offsets": [4, 4]},)"
                                 R"( "b": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]},)"
                                 R"( "c": {"dtype": "U8", "shape": [2], "data_offsets": [6, 8]}})", 8);
  auto parsed = parse_safetensors_header(bytes.data(), bytes.size(), "x");
  ASSERT_TRUE(parsed.is_ok()) << parsed.status().message();
  EXPECT_EQ(parsed->tensors.size(), 3u);
}

TEST(Safetensors, MissingFileIsNotFound) {
  auto f = SafetensorsFile::open(temp_path("does-not-exist.safetensors"));
  ASSERT_FALSE(f.is_ok());
  EXPECT_EQ(f.status().code(), StatusCode::kNotFound);
}

TEST(Safetensors, DtypeSizes) {
  EXPECT_EQ(safetensors_dtype_size("F32"), 4u);
  EXPECT_EQ(safetensors_dtype_size("BF16"), 2u);
  EXPECT_EQ(safetensors_dtype_size("F64"), 8u);
  EXPECT_EQ(safetensors_dtype_size("F8_E4M3"), 1u);
  EXPECT_EQ(safetensors_dtype_size("f32"), 0u);
}

}  // namespace
}  // namespace pagoda::model
