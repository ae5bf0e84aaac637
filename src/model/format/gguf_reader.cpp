// GGUF parsing: every field is bounds-checked against the bytes present and the file size,
// every count against the bytes that could hold it, before anything is allocated.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>

#include "model/format/gguf.h"

namespace pagoda::model {

namespace {

constexpr uint64_t kMinKvBytes = 8 + 1 + 4 + 1;              // key len, key, type, 1-byte value
constexpr uint64_t kMinTensorInfoBytes = 8 + 1 + 4 + 8 + 4 + 8;  // name, n_dims, 1 dim, type, offset
constexpr int kMaxArrayDepth = 8;                // arrays of arrays nested at most this deep
constexpr uint64_t kMaxNestedArrays = 1u << 16;  // inner arrays in the whole file (bounds memory)
constexpr size_t kTensorAlign = 32;              // in-memory alignment of tensor data

std::string at(uint64_t pos) { return " at byte " + std::to_string(pos); }

uint64_t align_up(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

}  // namespace

// Fills a GgufFile's metadata and tensor infos from the first `available` bytes of a file of
// `file_size` bytes. When the header runs past `available` but not past the file,
// parse_header fails and needs_more() is true (read_metadata_only then reads more).
class GgufParser {
 public:
  GgufParser(const uint8_t* data, size_t available, uint64_t file_size)
      : data_(data), available_(available), file_size_(file_size) {}

  Status parse_header(GgufFile* file);
  bool needs_more() const { return needs_more_; }

 private:
  uint64_t left() const { return file_size_ - pos_; }
  // Returns a pointer to the next n bytes and advances, or nullptr when they are not all present.
  const uint8_t* take(uint64_t n) {
    if (n > left()) return nullptr;
    if (n > available_ - pos_) {
      needs_more_ = true;
      return nullptr;
    }
    const uint8_t* p = data_ + pos_;
    pos_ += n;
    return p;
  }
  Status truncated(const std::string& what, uint64_t n) const {
    return Status::error("truncated: " + what + " needs " + std::to_string(n) + " bytes" + at(pos_) +
                         ", but the file ends at byte " + std::to_string(file_size_));
  }
  template <typename T>
  Status read(T* out, const std::string_view what) {
    const uint8_t* p = take(sizeof(T));
    if (p == nullptr) return truncated(std::string(what), sizeof(T));
    std::memcpy(out, p, sizeof(T));  // little-endian host
    return Status::ok();
  }
  // `describe()` names the string for error messages; it is called only on an error.
  template <typename Describe>
  Status read_string(std::string* out, const Describe& describe);
  Status parse_value(GgufType type, int depth, const std::string& key, GgufValue* out);
  Status parse_array(int depth, const std::string& key, GgufValue* out);
  Status parse_kv(GgufFile* file, uint64_t index);
  Status parse_tensor_info(GgufFile* file, uint64_t index);
  Status check_tensor_ranges(GgufFile* file);

  const uint8_t* data_;
  size_t available_;
  uint64_t file_size_;
  uint64_t pos_ = 0;
  bool needs_more_ = false;
  uint64_t nested_arrays_ = 0;
};

template <typename Describe>
Status GgufParser::read_string(std::string* out, const Describe& describe) {
  const uint64_t start = pos_;
  uint64_t len;
  const uint8_t* p = take(8);
  if (p == nullptr) return truncated("the length of " + describe(), 8);
  std::memcpy(&len, p, 8);
  if (len > left()) {
    return Status::error("the length of " + describe() + at(start) + " is " + std::to_string(len) +
                         ", past the end of the file (" + std::to_string(left()) + " bytes left)");
  }
  p = take(len);
  if (p == nullptr) return truncated(describe(), len);
  out->assign(reinterpret_cast<const char*>(p), len);
  return Status::ok();
}

Status GgufParser::parse_value(GgufType type, int depth, const std::string& key, GgufValue* out) {
  if (type == GgufType::kString) {
    std::string s;
    PAGODA_RETURN_IF_ERROR(read_string(&s, [&] { return "the string value of '" + key + "'"; }));
    *out = GgufValue::of_string(std::move(s));
    return Status::ok();
  }
  if (type == GgufType::kArray) return parse_array(depth, key, out);
  size_t size = gguf_type_size(type);
  const uint8_t* p = take(size);
  if (p == nullptr) return truncated(std::string("the ") + gguf_type_name(type) + " value of '" + key + "'", size);
  uint64_t bits = 0;
  std::memcpy(&bits, p, size);  // little-endian host: zero-extended
  *out = GgufValue::scalar_from_bits(type, bits);
  return Status::ok();
}

Status GgufParser::parse_array(int depth, const std::string& key, GgufValue* out) {
  uint64_t start = pos_;
  uint32_t raw_type;
  PAGODA_RETURN_IF_ERROR(read(&raw_type, "the element type of array '" + key + "'"));
  auto type = static_cast<GgufType>(raw_type);
  if (raw_type > static_cast<uint32_t>(GgufType::kFloat64)) {
    return Status::error("array '" + key + "' has unknown element type " + std::to_string(raw_type) + at(start));
  }
  if (type == GgufType::kArray && depth + 1 >= kMaxArrayDepth) {
    return Status::error("array '" + key + "' nests arrays deeper than " + std::to_string(kMaxArrayDepth) +
                         " levels" + at(start));
  }
  uint64_t count;
  PAGODA_RETURN_IF_ERROR(read(&count, "the element count of array '" + key + "'"));
  uint64_t min_bytes = type == GgufType::kString ? 8 : type == GgufType::kArray ? 12 : gguf_type_size(type);
  if (count > left() / min_bytes) {
    return Status::error("array '" + key + "' claims " + std::to_string(count) + " " + gguf_type_name(type) +
                         " elements" + at(start) + ", more than the " + std::to_string(left()) +
                         " bytes left in the file can hold");
  }
  if (type == GgufType::kString) {
    std::vector<std::string> strings(count);
    for (uint64_t i = 0; i < count; ++i) {
      PAGODA_RETURN_IF_ERROR(read_string(
          &strings[i], [&] { return "element " + std::to_string(i) + " of array '" + key + "'"; }));
    }
    *out = GgufValue::string_array(std::move(strings));
  } else if (type == GgufType::kArray) {
    nested_arrays_ += count;
    if (nested_arrays_ > kMaxNestedArrays) {
      return Status::error("array '" + key + "'" + at(start) + ": more than " +
                           std::to_string(kMaxNestedArrays) + " nested arrays in the file");
    }
    std::vector<GgufValue> arrays(count);
    std::string inner = key + "[]";
    for (uint64_t i = 0; i < count; ++i) {
      PAGODA_RETURN_IF_ERROR(parse_array(depth + 1, inner, &arrays[i]));
    }
    *out = GgufValue::array_of_arrays(std::move(arrays));
  } else {
    uint64_t bytes = count * min_bytes;
    const uint8_t* p = take(bytes);
    if (p == nullptr) return truncated("the elements of array '" + key + "'", bytes);
    *out = GgufValue::numeric_array(type, std::vector<uint8_t>(p, p + bytes));
  }
  return Status::ok();
}

Status GgufParser::parse_kv(GgufFile* file, uint64_t index) {
  uint64_t start = pos_;
  std::string key;
  PAGODA_RETURN_IF_ERROR(read_string(&key, [&] { return "the key of metadata entry #" + std::to_string(index); }));
  if (key.empty()) return Status::error("metadata entry #" + std::to_string(index) + " has an empty key" + at(start));
  if (auto it = file->key_index_.find(key); it != file->key_index_.end()) {
    return Status::error("duplicate metadata key '" + key + "'" + at(start) + " (entries #" +
                         std::to_string(it->second) + " and #" + std::to_string(index) + ")");
  }
  uint64_t type_pos = pos_;
  uint32_t raw_type;
  PAGODA_RETURN_IF_ERROR(read(&raw_type, "the value type of '" + key + "'"));
  if (raw_type > static_cast<uint32_t>(GgufType::kFloat64)) {
    return Status::error("metadata '" + key + "' has unknown value type " + std::to_string(raw_type) + at(type_pos));
  }
  const uint64_t value_pos = pos_;
  GgufValue value;
  PAGODA_RETURN_IF_ERROR(parse_value(static_cast<GgufType>(raw_type), 0, key, &value));
  if (key == "general.alignment") {
    if (value.type != GgufType::kUint32) {
      return Status::error(std::string("general.alignment has type ") + gguf_type_name(value.type) +
                           ", expected u32" + at(type_pos));
    }
    int64_t a = *value.as_int();
    if (a == 0 || (a & (a - 1)) != 0) {
      return Status::error("general.alignment = " + std::to_string(a) + at(value_pos) +
                           " is not a power of two");
    }
    file->alignment_ = static_cast<size_t>(a);
  }
  file->key_index_.emplace(key, file->metadata_.size());
  file->metadata_.emplace_back(std::move(key), std::move(value));
  return Status::ok();
}

Status GgufParser::parse_tensor_info(GgufFile* file, uint64_t index) {
  uint64_t start = pos_;
  std::string name;
  PAGODA_RETURN_IF_ERROR(read_string(&name, [&] { return "the name of tensor #" + std::to_string(index); }));
  if (name.empty()) return Status::error("tensor #" + std::to_string(index) + " has an empty name" + at(start));
  if (file->tensor_index_.count(name) != 0) {
    return Status::error("duplicate tensor name '" + name + "'" + at(start));
  }
  const std::string ctx = "tensor '" + name + "'";
  uint64_t field = pos_;
  uint32_t n_dims;
  PAGODA_RETURN_IF_ERROR(read(&n_dims, "n_dims of " + ctx));
  if (n_dims == 0 || n_dims > 4) {
    return Status::error(ctx + ": n_dims = " + std::to_string(n_dims) + at(field) + " (1 to 4 are supported)");
  }
  std::vector<int64_t> dims(n_dims);
  for (uint32_t d = 0; d < n_dims; ++d) {
    field = pos_;
    uint64_t dim;
    PAGODA_RETURN_IF_ERROR(read(&dim, "dimension " + std::to_string(d) + " of " + ctx));
    if (dim == 0 || dim > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return Status::error(ctx + ": dimension " + std::to_string(d) + " is " + std::to_string(dim) + at(field) +
                           " (must be between 1 and 2^63-1)");
    }
    dims[d] = static_cast<int64_t>(dim);
  }
  field = pos_;
  uint32_t ggml_type;
  PAGODA_RETURN_IF_ERROR(read(&ggml_type, "the type of " + ctx));
  if (ggml_type_info(ggml_type) == nullptr) {
    return Status::error(ctx + ": unknown ggml type " + std::to_string(ggml_type) + at(field));
  }
  auto bytes = ggml_tensor_bytes(dims, ggml_type);
  if (!bytes.is_ok()) return bytes.status().with_context(ctx + at(start));
  field = pos_;
  uint64_t offset;
  PAGODA_RETURN_IF_ERROR(read(&offset, "the data offset of " + ctx));
  if (offset % file->alignment_ != 0) {
    return Status::error(ctx + ": data offset " + std::to_string(offset) + at(field) +
                         " is not a multiple of the alignment " + std::to_string(file->alignment_));
  }
  GgufTensorInfo info;
  info.name = std::move(name);
  info.dims = std::move(dims);
  info.ggml_type = ggml_type;
  info.dtype = dtype_from_ggml_type(ggml_type);
  info.offset = offset;
  info.bytes = bytes.value();
  file->tensor_index_.emplace(info.name, file->tensors_.size());
  file->tensors_.push_back(std::move(info));
  return Status::ok();
}

Status GgufParser::check_tensor_ranges(GgufFile* file) {
  uint64_t data_size = file->data_offset_ <= file_size_ ? file_size_ - file->data_offset_ : 0;
  if (!file->tensors_.empty() && file->data_offset_ > file_size_) {
    return Status::error("truncated: the data section starts at byte " + std::to_string(file->data_offset_) +
                         ", but the file ends at byte " + std::to_string(file_size_));
  }
  std::vector<const GgufTensorInfo*> by_offset;
  by_offset.reserve(file->tensors_.size());
  for (const GgufTensorInfo& t : file->tensors_) {
    if (t.offset > data_size || t.bytes > data_size - t.offset) {
      return Status::error("tensor '" + t.name + "': data [" + std::to_string(t.offset) + ", " +
                           std::to_string(t.offset + t.bytes) + ") of the data section at byte " +
                           std::to_string(file->data_offset_) + " runs past the end of the file (data section is " +
                           std::to_string(data_size) + " bytes; truncated file or bad offset)");
    }
    by_offset.push_back(&t);
  }
  std::stable_sort(by_offset.begin(), by_offset.end(),
            [](const GgufTensorInfo* a, const GgufTensorInfo* b) { return a->offset < b->offset; });
  for (size_t i = 1; i < by_offset.size(); ++i) {
    const GgufTensorInfo& a = *by_offset[i - 1];
    const GgufTensorInfo& b = *by_offset[i];
    if (a.offset + a.bytes > b.offset) {
      return Status::error("tensors '" + a.name + "' [" + std::to_string(a.offset) + ", " +
                           std::to_string(a.offset + a.bytes) + ") and '" + b.name + "' [" +
                           std::to_string(b.offset) + ", " + std::to_string(b.offset + b.bytes) +
                           ") overlap in the data section");
    }
  }
  return Status::ok();
}

Status GgufParser::parse_header(GgufFile* file) {
  if (file_size_ < 4) return Status::error("too small to be a GGUF file (" + std::to_string(file_size_) + " bytes)");
  const uint8_t* magic = take(4);
  if (magic == nullptr) return truncated("the magic", 4);
  if (std::memcmp(magic, "GGUF", 4) != 0) {
    char buf[64];
    std::snprintf(buf, sizeof(buf), "%02x %02x %02x %02x", magic[0], magic[1], magic[2], magic[3]);
    return Status::error(std::string("not a GGUF file: starts with bytes ") + buf + ", expected \"GGUF\"");
  }
  uint32_t version;
  PAGODA_RETURN_IF_ERROR(read(&version, "the version"));
  if (version == 1) return Status::error("GGUF version 1 is not supported (only versions 2 and 3)");
  if (version == 0x02000000u || version == 0x03000000u) {
    return Status::error("big-endian GGUF files are not supported");
  }
  if (version != 2 && version != 3) {
    return Status::error("unsupported GGUF version " + std::to_string(version) + " (expected 2 or 3)");
  }
  file->version_ = version;
  uint64_t tensor_count, kv_count;
  PAGODA_RETURN_IF_ERROR(read(&tensor_count, "tensor_count"));
  PAGODA_RETURN_IF_ERROR(read(&kv_count, "kv_count"));
  if (kv_count > left() / kMinKvBytes) {
    return Status::error("kv_count = " + std::to_string(kv_count) + at(16) + " cannot fit in the " +
                         std::to_string(left()) + " bytes after the header");
  }
  if (tensor_count > left() / kMinTensorInfoBytes) {
    return Status::error("tensor_count = " + std::to_string(tensor_count) + at(8) + " cannot fit in the " +
                         std::to_string(left()) + " bytes after the header");
  }
  file->metadata_.reserve(kv_count);
  for (uint64_t i = 0; i < kv_count; ++i) PAGODA_RETURN_IF_ERROR(parse_kv(file, i));
  file->tensors_.reserve(tensor_count);
  for (uint64_t i = 0; i < tensor_count; ++i) PAGODA_RETURN_IF_ERROR(parse_tensor_info(file, i));
  file->data_offset_ = align_up(pos_, file->alignment_);
  file->tensor_ptrs_.assign(file->tensors_.size(), nullptr);
  return check_tensor_ranges(file);
}

// ---- GgufFile entry points ----

namespace {

// An open file descriptor, closed on scope exit.
class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

Result<uint64_t> open_regular(const std::string& path, Fd* fd) {
  if (fd->get() < 0) return Status::error(path + ": cannot open: " + std::strerror(errno));
  struct stat st;
  if (fstat(fd->get(), &st) != 0) return Status::error(path + ": cannot stat: " + std::strerror(errno));
  if (!S_ISREG(st.st_mode)) return Status::error(path + ": not a regular file");
  return static_cast<uint64_t>(st.st_size);
}

Status pread_all(int fd, uint8_t* dst, uint64_t bytes, uint64_t offset, const std::string& path) {
  while (bytes > 0) {
    size_t chunk = static_cast<size_t>(std::min<uint64_t>(bytes, 1u << 30));
    ssize_t n = ::pread(fd, dst, chunk, static_cast<off_t>(offset));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Status::error(path + ": read error at byte " + std::to_string(offset) + ": " + std::strerror(errno));
    if (n == 0) return Status::error(path + ": file shrank while reading (at byte " + std::to_string(offset) + ")");
    dst += n;
    bytes -= static_cast<uint64_t>(n);
    offset += static_cast<uint64_t>(n);
  }
  return Status::ok();
}

}  // namespace

Result<GgufFile> GgufFile::from_buffer(AlignedBuffer buffer, const std::string& name) {
  GgufFile file;
  GgufParser parser(buffer.data(), buffer.size(), buffer.size());
  PAGODA_RETURN_IF_ERROR(parser.parse_header(&file).with_context(name));
  if (file.tensors_.empty()) return file;
  if (file.data_offset_ % kTensorAlign == 0 && file.alignment_ % kTensorAlign == 0) {
    uint8_t* base = buffer.data() + file.data_offset_;  // buffer is page-aligned
    for (size_t i = 0; i < file.tensors_.size(); ++i) file.tensor_ptrs_[i] = base + file.tensors_[i].offset;
    file.buffers_.push_back(std::move(buffer));
    return file;
  }
  // Alignment below 32: repack the tensors, each at a 32-byte boundary.
  uint64_t total = 0;
  for (const GgufTensorInfo& t : file.tensors_) total += align_up(t.bytes, kTensorAlign);
  auto packed = AlignedBuffer::allocate(total);
  if (!packed.is_ok()) return packed.status().with_context(name);
  uint64_t pos = 0;
  for (size_t i = 0; i < file.tensors_.size(); ++i) {
    const GgufTensorInfo& t = file.tensors_[i];
    file.tensor_ptrs_[i] = packed->data() + pos;
    std::memcpy(file.tensor_ptrs_[i], buffer.data() + file.data_offset_ + t.offset, t.bytes);
    pos += align_up(t.bytes, kTensorAlign);
  }
  file.buffers_.push_back(std::move(packed).value());
  return file;
}

Result<GgufFile> GgufFile::parse(const uint8_t* data, size_t size, const std::string& name) {
  auto buffer = AlignedBuffer::allocate(size);
  if (!buffer.is_ok()) return buffer.status().with_context(name);
  if (size > 0) std::memcpy(buffer->data(), data, size);
  return from_buffer(std::move(buffer).value(), name);
}

Result<GgufFile> GgufFile::read(const std::string& path, const std::function<void(uint64_t, uint64_t)>& progress) {
  Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  PAGODA_ASSIGN_OR_RETURN(uint64_t size, open_regular(path, &fd));
  auto buffer = AlignedBuffer::allocate(size);
  if (!buffer.is_ok()) return buffer.status().with_context(path);
  constexpr uint64_t kStep = uint64_t{64} << 20;
  for (uint64_t done = 0; done < size;) {
    const uint64_t n = std::min(kStep, size - done);
    PAGODA_RETURN_IF_ERROR(pread_all(fd.get(), buffer->data() + done, n, done, path));
    done += n;
    if (progress) progress(done, size);
  }
  return from_buffer(std::move(buffer).value(), path);
}

Result<GgufFile> GgufFile::read_metadata_only(const std::string& path) {
  Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  PAGODA_ASSIGN_OR_RETURN(uint64_t size, open_regular(path, &fd));
  uint64_t chunk = std::min<uint64_t>(size, 1u << 20);
  std::vector<uint8_t> head;
  while (true) {
    uint64_t have = head.size();
    head.resize(chunk);
    PAGODA_RETURN_IF_ERROR(pread_all(fd.get(), head.data() + have, chunk - have, have, path));
    GgufFile file;
    GgufParser parser(head.data(), head.size(), size);
    Status status = parser.parse_header(&file);
    if (status.is_ok()) return file;
    if (!parser.needs_more() || chunk == size) return status.with_context(path);
    chunk = std::min<uint64_t>(size, chunk * 4);
  }
}

}  // namespace pagoda::model
