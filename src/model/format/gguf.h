// GGUF files: metadata (typed key/values) and tensors, read from disk or built in memory.
//
// Layout (v2/v3, little-endian): "GGUF", u32 version, u64 tensor_count, u64 kv_count,
// kv_count x {string key, u32 type, value}, tensor_count x {string name, u32 n_dims,
// u64 dims[n_dims] (ne0 first), u32 ggml_type, u64 offset}, zero padding to `alignment`,
// then the data section. A string is u64 length + bytes; an array is u32 element type,
// u64 count, elements. `alignment` is the u32 key general.alignment (default 32).
//
// Reading is defensive: a truncated, corrupt or hostile file gives one Status naming the
// file, what was expected and where (byte offset, key or tensor), and never reads out of
// bounds or allocates more than a small multiple of the file size.
//
// Tensor data lives in anonymous page-aligned memory owned by the GgufFile (read with
// pread, not a file mapping; see core/buffer.h), each tensor at >= 32-byte alignment.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/buffer.h"
#include "core/dtype.h"
#include "core/status.h"

namespace pagoda::model {

enum class GgufType : uint32_t {
  kUint8 = 0, kInt8 = 1, kUint16 = 2, kInt16 = 3, kUint32 = 4, kInt32 = 5, kFloat32 = 6,
  kBool = 7, kString = 8, kArray = 9, kUint64 = 10, kInt64 = 11, kFloat64 = 12,
};
const char* gguf_type_name(GgufType type);  // "u32", "string", "array", ...; "?" if invalid
// Bytes of one scalar of `type` on disk; 0 for kString and kArray.
size_t gguf_type_size(GgufType type);

// ---- ggml tensor types ----
inline constexpr uint32_t kGgmlTypeF32 = 0;
inline constexpr uint32_t kGgmlTypeF16 = 1;
inline constexpr uint32_t kGgmlTypeQ4_0 = 2;
inline constexpr uint32_t kGgmlTypeQ8_0 = 8;
inline constexpr uint32_t kGgmlTypeQ4_K = 12;
inline constexpr uint32_t kGgmlTypeQ5_K = 13;
inline constexpr uint32_t kGgmlTypeQ6_K = 14;
inline constexpr uint32_t kGgmlTypeBF16 = 30;

struct GgmlTypeInfo {
  const char* name;  // "f32", "q4_K", ...
  int block_elems;   // values per block (1 for plain types)
  int block_bytes;   // bytes per block
};
// nullptr for ids that are unknown or were removed from ggml (4, 5, 31-33, 36-38).
const GgmlTypeInfo* ggml_type_info(uint32_t ggml_type);
// "f32", "q4_K", ...; for unknown ids "type_N" in a per-thread buffer that the next call
// on the same thread overwrites.
const char* ggml_type_name(uint32_t ggml_type);
std::optional<DType> dtype_from_ggml_type(uint32_t ggml_type);  // the types Pagoda computes with
uint32_t ggml_type_from_dtype(DType dtype);
// Bytes of a tensor of `dims` (ne0 first) and `ggml_type`, or an error saying which
// dimension or type is bad: 1..4 dims, each > 0, ne0 a multiple of the block size, no overflow.
Result<uint64_t> ggml_tensor_bytes(const std::vector<int64_t>& dims, uint32_t ggml_type);

// One metadata value: a scalar, a string, or an array whose elements all have
// `element_type` (arrays of arrays are allowed; each inner array has its own element type).
// Arrays of numbers/bools keep their raw little-endian bytes (cheap, exact round trip),
// string arrays a vector<string>, arrays of arrays a vector<GgufValue>.
struct GgufValue {
  GgufType type = GgufType::kUint32;
  GgufType element_type = GgufType::kUint8;  // meaningful for kArray only

  static GgufValue of_u8(uint8_t v);
  static GgufValue of_i8(int8_t v);
  static GgufValue of_u16(uint16_t v);
  static GgufValue of_i16(int16_t v);
  static GgufValue of_u32(uint32_t v);
  static GgufValue of_i32(int32_t v);
  static GgufValue of_u64(uint64_t v);
  static GgufValue of_i64(int64_t v);
  static GgufValue of_f32(float v);
  static GgufValue of_f64(double v);
  static GgufValue of_bool(bool v);
  static GgufValue of_string(std::string v);
  static GgufValue string_array(std::vector<std::string> v);
  static GgufValue f32_array(const std::vector<float>& v);
  static GgufValue i32_array(const std::vector<int32_t>& v);
  static GgufValue u32_array(const std::vector<uint32_t>& v);
  static GgufValue i64_array(const std::vector<int64_t>& v);
  // Any numeric/bool element type from raw little-endian bytes (size CHECKed).
  static GgufValue numeric_array(GgufType element_type, std::vector<uint8_t> raw);
  static GgufValue array_of_arrays(std::vector<GgufValue> arrays);  // each CHECKed to be kArray
  // A numeric/bool scalar from its raw little-endian bits (zero-extended).
  static GgufValue scalar_from_bits(GgufType type, uint64_t bits);

  bool is_integer() const;  // integer scalar (not bool)
  std::optional<int64_t> as_int() const;   // integer scalar that fits int64
  std::optional<double> as_float() const;  // f32/f64 or integer scalar
  std::optional<bool> as_bool() const;
  const std::string* as_string() const;   // nullptr unless kString
  // Arrays.
  size_t array_size() const;  // 0 unless kArray
  const std::vector<std::string>* as_string_array() const;  // nullptr unless strings
  const std::vector<GgufValue>* as_array_array() const;     // nullptr unless arrays
  const std::vector<uint8_t>* array_bytes() const;  // raw LE elements; nullptr unless numeric
  std::optional<std::vector<float>> to_float_array() const;   // numeric elements
  std::optional<std::vector<int64_t>> to_int_array() const;   // integer elements fitting int64
  uint64_t scalar_bits() const { return bits_; }  // raw LE bits of a numeric/bool scalar
  // Short human-readable form for `pagoda info`: 3, 1e-05, "llama", [f32 x 512: 0, -1, ...].
  std::string to_display_string(size_t max_elements = 6) const;
  bool operator==(const GgufValue& other) const;

 private:
  uint64_t bits_ = 0;
  std::string str_;
  std::vector<uint8_t> raw_;
  std::vector<std::string> strings_;
  std::vector<GgufValue> arrays_;
};

struct GgufTensorInfo {
  std::string name;
  std::vector<int64_t> dims;   // ne0 first (ne0 = the contiguous / input dimension), 1..4 dims
  uint32_t ggml_type = 0;      // raw ggml type id
  std::optional<DType> dtype;  // set when Pagoda computes with this type
  uint64_t offset = 0;         // relative to the start of the data section
  uint64_t bytes = 0;
  int64_t num_elements() const;
};

// Move-only. Tensor data pointers stay valid across moves; add_tensor may reallocate
// tensors() (invalidating GgufTensorInfo references, not data pointers).
class GgufFile {
 public:
  // progress(done, total bytes), when given, is called as the file is read (64 MiB steps).
  static Result<GgufFile> read(const std::string& path,
                               const std::function<void(uint64_t done, uint64_t total)>& progress = nullptr);
  static Result<GgufFile> parse(const uint8_t* data, size_t size, const std::string& name);
  // Header only: tensors() is filled (and checked against the file size) but
  // tensor_data() returns nullptr. Reads about as many bytes as the header needs.
  static Result<GgufFile> read_metadata_only(const std::string& path);

  GgufFile();  // empty, version 3, alignment 32
  GgufFile(GgufFile&&) noexcept = default;
  GgufFile& operator=(GgufFile&&) noexcept = default;
  GgufFile(const GgufFile&) = delete;
  GgufFile& operator=(const GgufFile&) = delete;

  uint32_t version() const { return version_; }
  size_t alignment() const { return alignment_; }
  uint64_t data_offset() const { return data_offset_; }  // file offset of the data section (read files)

  // ---- metadata, in file order ----
  const std::vector<std::pair<std::string, GgufValue>>& metadata() const { return metadata_; }
  const GgufValue* find(std::string_view key) const;
  std::optional<int64_t> get_int(std::string_view key) const;  // integer types only
  std::optional<double> get_float(std::string_view key) const;  // f32/f64, ints accepted
  std::optional<std::string> get_string(std::string_view key) const;
  std::optional<bool> get_bool(std::string_view key) const;
  const std::vector<std::string>* get_string_array(std::string_view key) const;
  std::optional<std::vector<float>> get_float_array(std::string_view key) const;
  std::optional<std::vector<int64_t>> get_int_array(std::string_view key) const;

  // ---- tensors, in file order ----
  const std::vector<GgufTensorInfo>& tensors() const { return tensors_; }
  const GgufTensorInfo* find_tensor(std::string_view name) const;
  // >= 32-byte aligned, owned by this file; `t` must be an element of tensors().
  const uint8_t* tensor_data(const GgufTensorInfo& t) const;

  // ---- building ----
  // Replaces an existing key in place, else appends. general.alignment must be a u32
  // power of two (CHECKed: a bug in the caller).
  void set(std::string key, GgufValue value);
  bool erase(std::string_view key);  // false if absent
  // Copies `bytes` bytes of data; checks name, dims and that bytes match dims/type.
  Status add_tensor(std::string name, std::vector<int64_t> dims, uint32_t ggml_type,
                    const void* data, size_t bytes);
  // Same without a copy: returns zero-filled writable memory of the tensor's size.
  Result<uint8_t*> add_tensor_uninitialized(std::string name, std::vector<int64_t> dims,
                                            uint32_t ggml_type);
  // GGUF v3, alignment from general.alignment, tensors in order, offsets recomputed.
  Status write(const std::string& path) const;
  std::vector<uint8_t> to_bytes() const;  // the exact bytes write() would produce

 private:
  static Result<GgufFile> from_buffer(AlignedBuffer buffer, const std::string& name);
  Result<GgufTensorInfo> make_tensor_info(std::string name, std::vector<int64_t> dims,
                                          uint32_t ggml_type) const;

  uint32_t version_ = 3;
  size_t alignment_ = 32;
  uint64_t data_offset_ = 0;
  std::vector<std::pair<std::string, GgufValue>> metadata_;
  std::map<std::string, size_t, std::less<>> key_index_;  // key -> index in metadata_
  std::vector<GgufTensorInfo> tensors_;
  std::map<std::string, size_t, std::less<>> tensor_index_;  // name -> index in tensors_
  std::vector<uint8_t*> tensor_ptrs_;  // [tensors_.size()], into buffers_; nullptr: not loaded
  std::vector<AlignedBuffer> buffers_;  // one per read file, or one per added tensor
  friend class GgufParser;
};

}  // namespace pagoda::model
