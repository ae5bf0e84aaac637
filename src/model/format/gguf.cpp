// GGUF type tables, GgufValue, and the in-memory side of GgufFile (lookups, building).
// Parsing is in gguf_reader.cpp, serialisation in gguf_writer.cpp.
#include "model/format/gguf.h"

#include <cstdio>
#include <cstring>
#include <limits>

namespace pagoda::model {

namespace {

// Indexed by ggml type id; block_elems == 0 marks ids removed from ggml.
constexpr GgmlTypeInfo kGgmlTypes[] = {
    {"f32", 1, 4},         // 0
    {"f16", 1, 2},         // 1
    {"q4_0", 32, 18},      // 2
    {"q4_1", 32, 20},      // 3
    {"q4_2", 0, 0},        // 4 (removed)
    {"q4_3", 0, 0},        // 5 (removed)
    {"q5_0", 32, 22},      // 6
    {"q5_1", 32, 24},      // 7
    {"q8_0", 32, 34},      // 8
    {"q8_1", 32, 36},      // 9
    {"q2_K", 256, 84},     // 10
    {"q3_K", 256, 110},    // 11
    {"q4_K", 256, 144},    // 12
    {"q5_K", 256, 176},    // 13
    {"q6_K", 256, 210},    // 14
    {"q8_K", 256, 292},    // 15
    {"iq2_xxs", 256, 66},  // 16
    {"iq2_xs", 256, 74},   // 17
    {"iq3_xxs", 256, 98},  // 18
    {"iq1_s", 256, 50},    // 19
    {"iq4_nl", 32, 18},    // 20
    {"iq3_s", 256, 110},   // 21
    {"iq2_s", 256, 82},    // 22
    {"iq4_xs", 256, 136},  // 23
    {"i8", 1, 1},          // 24
    {"i16", 1, 2},         // 25
    {"i32", 1, 4},         // 26
    {"i64", 1, 8},         // 27
    {"f64", 1, 8},         // 28
    {"iq1_m", 256, 56},    // 29
    {"bf16", 1, 2},        // 30
    {"q4_0_4_4", 0, 0},    // 31 (removed)
    {"q4_0_4_8", 0, 0},    // 32 (removed)
    {"q4_0_8_8", 0, 0},    // 33 (removed)
    {"tq1_0", 256, 54},    // 34
    {"tq2_0", 256, 66},    // 35
    {"iq4_nl_4_4", 0, 0},  // 36 (removed)
    {"iq4_nl_4_8", 0, 0},  // 37 (removed)
    {"iq4_nl_8_8", 0, 0},  // 38 (removed)
    {"mxfp4", 32, 17},     // 39
};

constexpr const char* kGgufTypeNames[] = {"u8",  "i8",     "u16",   "i16", "u32", "i32", "f32",
                                          "bool", "string", "array", "u64", "i64", "f64"};
constexpr size_t kGgufTypeSizes[] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};

bool is_valid(GgufType t) { return static_cast<uint32_t>(t) < std::size(kGgufTypeSizes); }
bool is_numeric(GgufType t) {
  return is_valid(t) && t != GgufType::kString && t != GgufType::kArray;
}
bool is_integer_type(GgufType t) {
  return is_numeric(t) && t != GgufType::kFloat32 && t != GgufType::kFloat64 && t != GgufType::kBool;
}

// One numeric element from its zero-extended bits, as int64 (nullopt: not an integer, or a
// u64 above INT64_MAX).
std::optional<int64_t> decode_int(GgufType type, uint64_t bits) {
  switch (type) {
    case GgufType::kUint8: return static_cast<int64_t>(static_cast<uint8_t>(bits));
    case GgufType::kInt8: return static_cast<int64_t>(static_cast<int8_t>(bits));
    case GgufType::kUint16: return static_cast<int64_t>(static_cast<uint16_t>(bits));
    case GgufType::kInt16: return static_cast<int64_t>(static_cast<int16_t>(bits));
    case GgufType::kUint32: return static_cast<int64_t>(static_cast<uint32_t>(bits));
    case GgufType::kInt32: return static_cast<int64_t>(static_cast<int32_t>(bits));
    case GgufType::kInt64: return static_cast<int64_t>(bits);
    case GgufType::kUint64:
      if (bits > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return std::nullopt;
      return static_cast<int64_t>(bits);
    default: return std::nullopt;
  }
}

std::optional<double> decode_float(GgufType type, uint64_t bits) {
  if (type == GgufType::kFloat32) {
    float f;
    uint32_t b = static_cast<uint32_t>(bits);
    std::memcpy(&f, &b, 4);
    return f;
  }
  if (type == GgufType::kFloat64) {
    double d;
    std::memcpy(&d, &bits, 8);
    return d;
  }
  if (type == GgufType::kUint64) return static_cast<double>(bits);
  if (auto i = decode_int(type, bits)) return static_cast<double>(*i);
  return std::nullopt;
}

uint64_t load_bits(const uint8_t* p, size_t size) {
  uint64_t bits = 0;
  for (size_t i = 0; i < size; ++i) bits |= static_cast<uint64_t>(p[i]) << (8 * i);
  return bits;
}

template <typename T>
std::vector<uint8_t> to_raw(const std::vector<T>& v) {
  std::vector<uint8_t> raw(v.size() * sizeof(T));
  if (!v.empty()) std::memcpy(raw.data(), v.data(), raw.size());  // little-endian host
  return raw;
}

std::string scalar_display(GgufType type, uint64_t bits) {
  if (type == GgufType::kBool) return bits != 0 ? "true" : "false";
  if (type == GgufType::kFloat32 || type == GgufType::kFloat64) {
    char buf[32];
    std::snprintf(buf, sizeof(buf), "%g", *decode_float(type, bits));
    return buf;
  }
  if (type == GgufType::kUint64) return std::to_string(bits);
  return std::to_string(decode_int(type, bits).value_or(0));
}

std::string quoted(const std::string& s, size_t max_chars) {
  std::string out = "\"";
  for (size_t i = 0; i < s.size() && i < max_chars; ++i) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    if (c == '\n') out += "\\n";
    else if (c == '"' || c == '\\') out += std::string("\\") + static_cast<char>(c);
    else if (c < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\x%02x", c);
      out += buf;
    } else out += static_cast<char>(c);
  }
  if (s.size() > max_chars) out += "...";
  return out + "\"";
}

}  // namespace

const char* gguf_type_name(GgufType type) {
  return is_valid(type) ? kGgufTypeNames[static_cast<uint32_t>(type)] : "?";
}

size_t gguf_type_size(GgufType type) {
  return is_valid(type) ? kGgufTypeSizes[static_cast<uint32_t>(type)] : 0;
}

const GgmlTypeInfo* ggml_type_info(uint32_t ggml_type) {
  if (ggml_type >= std::size(kGgmlTypes) || kGgmlTypes[ggml_type].block_elems == 0) return nullptr;
  return &kGgmlTypes[ggml_type];
}

const char* ggml_type_name(uint32_t ggml_type) {
  if (const GgmlTypeInfo* info = ggml_type_info(ggml_type)) return info->name;
  thread_local char buf[24];  // per-thread scratch for the returned name
  std::snprintf(buf, sizeof(buf), "type_%u", ggml_type);
  return buf;
}

std::optional<DType> dtype_from_ggml_type(uint32_t ggml_type) {
  switch (ggml_type) {
    case kGgmlTypeF32: return DType::kF32;
    case kGgmlTypeF16: return DType::kF16;
    case kGgmlTypeBF16: return DType::kBF16;
    case kGgmlTypeQ8_0: return DType::kQ8_0;
    case kGgmlTypeQ4_0: return DType::kQ4_0;
    case kGgmlTypeQ4_K: return DType::kQ4_K;
    case kGgmlTypeQ5_K: return DType::kQ5_K;
    case kGgmlTypeQ6_K: return DType::kQ6_K;
    default: return std::nullopt;
  }
}

uint32_t ggml_type_from_dtype(DType dtype) {
  switch (dtype) {
    case DType::kF32: return kGgmlTypeF32;
    case DType::kF16: return kGgmlTypeF16;
    case DType::kBF16: return kGgmlTypeBF16;
    case DType::kQ8_0: return kGgmlTypeQ8_0;
    case DType::kQ4_0: return kGgmlTypeQ4_0;
    case DType::kQ4_K: return kGgmlTypeQ4_K;
    case DType::kQ5_K: return kGgmlTypeQ5_K;
    case DType::kQ6_K: return kGgmlTypeQ6_K;
  }
  CHECK(false) << "unknown dtype " << static_cast<int>(dtype);
  return 0;
}

Result<uint64_t> ggml_tensor_bytes(const std::vector<int64_t>& dims, uint32_t ggml_type) {
  const GgmlTypeInfo* info = ggml_type_info(ggml_type);
  if (info == nullptr) return Status::error("unknown ggml tensor type " + std::to_string(ggml_type));
  if (dims.empty() || dims.size() > 4) {
    return Status::error(std::to_string(dims.size()) + " dimensions (1 to 4 are supported)");
  }
  int64_t elems = 1;
  for (size_t i = 0; i < dims.size(); ++i) {
    if (dims[i] <= 0) {
      return Status::error("dimension " + std::to_string(i) + " is " + std::to_string(dims[i]) +
                           " (must be positive)");
    }
    if (__builtin_mul_overflow(elems, dims[i], &elems)) {
      return Status::error("the element count overflows 64 bits");
    }
  }
  if (dims[0] % info->block_elems != 0) {
    return Status::error("ne0 = " + std::to_string(dims[0]) + " is not a multiple of the " +
                         info->name + " block size " + std::to_string(info->block_elems));
  }
  uint64_t bytes;
  if (__builtin_mul_overflow(static_cast<uint64_t>(elems / info->block_elems),
                             static_cast<uint64_t>(info->block_bytes), &bytes) ||
      bytes > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
    return Status::error("the byte size overflows 64 bits");
  }
  return bytes;
}

int64_t GgufTensorInfo::num_elements() const {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;  // validated on construction: no overflow
  return n;
}

// ---- GgufValue ----

GgufValue GgufValue::scalar_from_bits(GgufType type, uint64_t bits) {
  CHECK(is_numeric(type)) << "scalar_from_bits with type " << static_cast<uint32_t>(type);
  GgufValue out;
  out.type = type;
  size_t size = gguf_type_size(type);
  out.bits_ = size == 8 ? bits : bits & ((uint64_t{1} << (8 * size)) - 1);
  return out;
}

namespace {
template <typename T>
GgufValue scalar_of(GgufType type, T v) {
  uint64_t bits = 0;
  std::memcpy(&bits, &v, sizeof(T));  // little-endian host: zero-extended
  return GgufValue::scalar_from_bits(type, bits);
}
}  // namespace

GgufValue GgufValue::of_u8(uint8_t v) { return scalar_of(GgufType::kUint8, v); }
GgufValue GgufValue::of_i8(int8_t v) { return scalar_of(GgufType::kInt8, v); }
GgufValue GgufValue::of_u16(uint16_t v) { return scalar_of(GgufType::kUint16, v); }
GgufValue GgufValue::of_i16(int16_t v) { return scalar_of(GgufType::kInt16, v); }
GgufValue GgufValue::of_u32(uint32_t v) { return scalar_of(GgufType::kUint32, v); }
GgufValue GgufValue::of_i32(int32_t v) { return scalar_of(GgufType::kInt32, v); }
GgufValue GgufValue::of_u64(uint64_t v) { return scalar_of(GgufType::kUint64, v); }
GgufValue GgufValue::of_i64(int64_t v) { return scalar_of(GgufType::kInt64, v); }
GgufValue GgufValue::of_f32(float v) { return scalar_of(GgufType::kFloat32, v); }
GgufValue GgufValue::of_f64(double v) { return scalar_of(GgufType::kFloat64, v); }

GgufValue GgufValue::of_bool(bool v) { return scalar_from_bits(GgufType::kBool, v ? 1 : 0); }

GgufValue GgufValue::of_string(std::string v) {
  GgufValue out;
  out.type = GgufType::kString;
  out.str_ = std::move(v);
  return out;
}

GgufValue GgufValue::string_array(std::vector<std::string> v) {
  GgufValue out;
  out.type = GgufType::kArray;
  out.element_type = GgufType::kString;
  out.strings_ = std::move(v);
  return out;
}

GgufValue GgufValue::numeric_array(GgufType element_type, std::vector<uint8_t> raw) {
  CHECK(is_numeric(element_type)) << "numeric_array of type " << static_cast<uint32_t>(element_type);
  CHECK_EQ(raw.size() % gguf_type_size(element_type), 0u);
  GgufValue out;
  out.type = GgufType::kArray;
  out.element_type = element_type;
  out.raw_ = std::move(raw);
  return out;
}

GgufValue GgufValue::f32_array(const std::vector<float>& v) { return numeric_array(GgufType::kFloat32, to_raw(v)); }
GgufValue GgufValue::i32_array(const std::vector<int32_t>& v) { return numeric_array(GgufType::kInt32, to_raw(v)); }
GgufValue GgufValue::u32_array(const std::vector<uint32_t>& v) { return numeric_array(GgufType::kUint32, to_raw(v)); }
GgufValue GgufValue::i64_array(const std::vector<int64_t>& v) { return numeric_array(GgufType::kInt64, to_raw(v)); }

GgufValue GgufValue::array_of_arrays(std::vector<GgufValue> arrays) {
  for (const GgufValue& a : arrays) CHECK(a.type == GgufType::kArray) << "array_of_arrays element";
  GgufValue out;
  out.type = GgufType::kArray;
  out.element_type = GgufType::kArray;
  out.arrays_ = std::move(arrays);
  return out;
}

bool GgufValue::is_integer() const { return is_integer_type(type); }

std::optional<int64_t> GgufValue::as_int() const { return decode_int(type, bits_); }

std::optional<double> GgufValue::as_float() const { return decode_float(type, bits_); }

std::optional<bool> GgufValue::as_bool() const {
  if (type != GgufType::kBool) return std::nullopt;
  return bits_ != 0;
}

const std::string* GgufValue::as_string() const { return type == GgufType::kString ? &str_ : nullptr; }

size_t GgufValue::array_size() const {
  if (type != GgufType::kArray) return 0;
  if (element_type == GgufType::kString) return strings_.size();
  if (element_type == GgufType::kArray) return arrays_.size();
  return raw_.size() / gguf_type_size(element_type);
}

const std::vector<std::string>* GgufValue::as_string_array() const {
  return type == GgufType::kArray && element_type == GgufType::kString ? &strings_ : nullptr;
}

const std::vector<GgufValue>* GgufValue::as_array_array() const {
  return type == GgufType::kArray && element_type == GgufType::kArray ? &arrays_ : nullptr;
}

const std::vector<uint8_t>* GgufValue::array_bytes() const {
  return type == GgufType::kArray && is_numeric(element_type) ? &raw_ : nullptr;
}

std::optional<std::vector<float>> GgufValue::to_float_array() const {
  if (type != GgufType::kArray || !is_numeric(element_type) || element_type == GgufType::kBool) {
    return std::nullopt;
  }
  size_t size = gguf_type_size(element_type);
  std::vector<float> out(raw_.size() / size);
  for (size_t i = 0; i < out.size(); ++i) {
    out[i] = static_cast<float>(*decode_float(element_type, load_bits(raw_.data() + i * size, size)));
  }
  return out;
}

std::optional<std::vector<int64_t>> GgufValue::to_int_array() const {
  if (type != GgufType::kArray || !is_integer_type(element_type)) return std::nullopt;
  size_t size = gguf_type_size(element_type);
  std::vector<int64_t> out(raw_.size() / size);
  for (size_t i = 0; i < out.size(); ++i) {
    auto v = decode_int(element_type, load_bits(raw_.data() + i * size, size));
    if (!v) return std::nullopt;
    out[i] = *v;
  }
  return out;
}

std::string GgufValue::to_display_string(size_t max_elements) const {
  if (type == GgufType::kString) return quoted(str_, 80);
  if (type != GgufType::kArray) return scalar_display(type, bits_);
  size_t n = array_size();
  std::string out = std::string("[") + gguf_type_name(element_type) + " x " + std::to_string(n);
  for (size_t i = 0; i < n && i < max_elements; ++i) {
    out += i == 0 ? ": " : ", ";
    if (element_type == GgufType::kString) {
      out += quoted(strings_[i], 24);
    } else if (element_type == GgufType::kArray) {
      out += arrays_[i].to_display_string(max_elements);
    } else {
      size_t size = gguf_type_size(element_type);
      out += scalar_display(element_type, load_bits(raw_.data() + i * size, size));
    }
  }
  if (n > max_elements) out += ", ...";
  return out + "]";
}

bool GgufValue::operator==(const GgufValue& other) const {
  return type == other.type && (type != GgufType::kArray || element_type == other.element_type) &&
         bits_ == other.bits_ && str_ == other.str_ && raw_ == other.raw_ &&
         strings_ == other.strings_ && arrays_ == other.arrays_;
}

// ---- GgufFile: lookups ----

GgufFile::GgufFile() = default;

const GgufValue* GgufFile::find(std::string_view key) const {
  auto it = key_index_.find(key);
  return it == key_index_.end() ? nullptr : &metadata_[it->second].second;
}

std::optional<int64_t> GgufFile::get_int(std::string_view key) const {
  const GgufValue* v = find(key);
  return v != nullptr ? v->as_int() : std::nullopt;
}

std::optional<double> GgufFile::get_float(std::string_view key) const {
  const GgufValue* v = find(key);
  return v != nullptr ? v->as_float() : std::nullopt;
}

std::optional<std::string> GgufFile::get_string(std::string_view key) const {
  const GgufValue* v = find(key);
  if (v == nullptr || v->as_string() == nullptr) return std::nullopt;
  return *v->as_string();
}

std::optional<bool> GgufFile::get_bool(std::string_view key) const {
  const GgufValue* v = find(key);
  return v != nullptr ? v->as_bool() : std::nullopt;
}

const std::vector<std::string>* GgufFile::get_string_array(std::string_view key) const {
  const GgufValue* v = find(key);
  return v != nullptr ? v->as_string_array() : nullptr;
}

std::optional<std::vector<float>> GgufFile::get_float_array(std::string_view key) const {
  const GgufValue* v = find(key);
  return v != nullptr ? v->to_float_array() : std::nullopt;
}

std::optional<std::vector<int64_t>> GgufFile::get_int_array(std::string_view key) const {
  const GgufValue* v = find(key);
  return v != nullptr ? v->to_int_array() : std::nullopt;
}

const GgufTensorInfo* GgufFile::find_tensor(std::string_view name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

const uint8_t* GgufFile::tensor_data(const GgufTensorInfo& t) const {
  CHECK(!tensors_.empty() && &t >= tensors_.data() && &t < tensors_.data() + tensors_.size())
      << "tensor_data: '" << t.name << "' is not a tensor of this file";
  return tensor_ptrs_[static_cast<size_t>(&t - tensors_.data())];
}

// ---- GgufFile: building ----

void GgufFile::set(std::string key, GgufValue value) {
  if (key == "general.alignment") {
    auto a = value.as_int();
    CHECK(value.type == GgufType::kUint32 && a && *a > 0 && (*a & (*a - 1)) == 0)
        << "general.alignment must be a u32 power of two";
    alignment_ = static_cast<size_t>(*a);
  }
  auto it = key_index_.find(key);
  if (it != key_index_.end()) {
    metadata_[it->second].second = std::move(value);
    return;
  }
  key_index_.emplace(key, metadata_.size());
  metadata_.emplace_back(std::move(key), std::move(value));
}

bool GgufFile::erase(std::string_view key) {
  auto it = key_index_.find(key);
  if (it == key_index_.end()) return false;
  metadata_.erase(metadata_.begin() + static_cast<std::ptrdiff_t>(it->second));
  key_index_.clear();
  for (size_t i = 0; i < metadata_.size(); ++i) key_index_.emplace(metadata_[i].first, i);
  if (key == "general.alignment") alignment_ = 32;
  return true;
}

Result<GgufTensorInfo> GgufFile::make_tensor_info(std::string name, std::vector<int64_t> dims,
                                                  uint32_t ggml_type) const {
  if (name.empty()) return Status::error("a tensor name is empty");
  if (tensor_index_.count(name) != 0) return Status::error("tensor '" + name + "' is already present");
  auto bytes = ggml_tensor_bytes(dims, ggml_type);
  if (!bytes.is_ok()) return bytes.status().with_context("tensor '" + name + "'");
  uint64_t end = 0;
  for (const GgufTensorInfo& t : tensors_) end = std::max(end, t.offset + t.bytes);
  GgufTensorInfo info;
  info.name = std::move(name);
  info.dims = std::move(dims);
  info.ggml_type = ggml_type;
  info.dtype = dtype_from_ggml_type(ggml_type);
  info.offset = (end + alignment_ - 1) / alignment_ * alignment_;
  info.bytes = bytes.value();
  return info;
}

Result<uint8_t*> GgufFile::add_tensor_uninitialized(std::string name, std::vector<int64_t> dims,
                                                    uint32_t ggml_type) {
  PAGODA_ASSIGN_OR_RETURN(GgufTensorInfo info, make_tensor_info(std::move(name), std::move(dims), ggml_type));
  auto buffer = AlignedBuffer::allocate(info.bytes);
  if (!buffer.is_ok()) return buffer.status().with_context("tensor '" + info.name + "'");
  uint8_t* data = buffer->data();
  buffers_.push_back(std::move(buffer).value());
  tensor_index_.emplace(info.name, tensors_.size());
  tensors_.push_back(std::move(info));
  tensor_ptrs_.push_back(data);
  return data;
}

Status GgufFile::add_tensor(std::string name, std::vector<int64_t> dims, uint32_t ggml_type,
                            const void* data, size_t bytes) {
  auto expected = ggml_tensor_bytes(dims, ggml_type);
  if (expected.is_ok() && expected.value() != bytes) {
    return Status::error("tensor '" + name + "': " + std::to_string(bytes) + " bytes given, " +
                         std::to_string(expected.value()) + " expected for " +
                         ggml_type_name(ggml_type) + " dims");
  }
  PAGODA_ASSIGN_OR_RETURN(uint8_t * dst, add_tensor_uninitialized(std::move(name), std::move(dims), ggml_type));
  std::memcpy(dst, data, bytes);
  return Status::ok();
}

}  // namespace pagoda::model
