// GGUF serialisation: v3, little-endian, tensors in tensors() order, each tensor's data
// padded with zeros to the alignment (as llama.cpp and gguf-py do, so the file ends aligned).
#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <functional>

#include "model/format/gguf.h"

namespace pagoda::model {

namespace {

// Receives the bytes of the file in order; `emit` may be backed by a FILE* or a vector.
class Sink {
 public:
  explicit Sink(std::function<void(const void*, size_t)> emit) : emit_(std::move(emit)) {}
  void bytes(const void* p, size_t n) {
    if (n > 0) emit_(p, n);
    written_ += n;
  }
  template <typename T>
  void pod(T v) { bytes(&v, sizeof(T)); }  // little-endian host
  void string(const std::string& s) {
    pod<uint64_t>(s.size());
    bytes(s.data(), s.size());
  }
  void pad_to(uint64_t alignment) {
    static constexpr uint8_t kZeros[256] = {};
    while (written_ % alignment != 0) {
      uint64_t n = std::min<uint64_t>(alignment - written_ % alignment, sizeof(kZeros));
      bytes(kZeros, n);
    }
  }

 private:
  std::function<void(const void*, size_t)> emit_;
  uint64_t written_ = 0;
};

void write_array_body(Sink& sink, const GgufValue& v) {
  CHECK(v.as_string_array() != nullptr || v.as_array_array() != nullptr || v.array_bytes() != nullptr)
      << "invalid GGUF array element type " << static_cast<uint32_t>(v.element_type);
  sink.pod<uint32_t>(static_cast<uint32_t>(v.element_type));
  sink.pod<uint64_t>(v.array_size());
  if (const auto* strings = v.as_string_array()) {
    for (const std::string& s : *strings) sink.string(s);
  } else if (const auto* arrays = v.as_array_array()) {
    for (const GgufValue& a : *arrays) write_array_body(sink, a);
  } else {
    const std::vector<uint8_t>& raw = *v.array_bytes();
    sink.bytes(raw.data(), raw.size());
  }
}

void write_value(Sink& sink, const GgufValue& v) {
  if (v.type == GgufType::kString) {
    sink.string(*v.as_string());
  } else if (v.type == GgufType::kArray) {
    write_array_body(sink, v);
  } else {
    CHECK_GT(gguf_type_size(v.type), 0u) << "invalid GGUF value type " << static_cast<uint32_t>(v.type);
    uint64_t bits = v.scalar_bits();
    sink.bytes(&bits, gguf_type_size(v.type));  // low bytes first on a little-endian host
  }
}

// The whole file; every tensor must have its data loaded.
void serialize(const GgufFile& file, Sink& sink) {
  const uint64_t alignment = file.alignment();
  sink.bytes("GGUF", 4);
  sink.pod<uint32_t>(3);
  sink.pod<uint64_t>(file.tensors().size());
  sink.pod<uint64_t>(file.metadata().size());
  for (const auto& [key, value] : file.metadata()) {
    sink.string(key);
    sink.pod<uint32_t>(static_cast<uint32_t>(value.type));
    write_value(sink, value);
  }
  uint64_t offset = 0;
  for (const GgufTensorInfo& t : file.tensors()) {
    sink.string(t.name);
    sink.pod<uint32_t>(static_cast<uint32_t>(t.dims.size()));
    for (int64_t d : t.dims) sink.pod<uint64_t>(static_cast<uint64_t>(d));
    sink.pod<uint32_t>(t.ggml_type);
    sink.pod<uint64_t>(offset);
    offset = (offset + t.bytes + alignment - 1) / alignment * alignment;
  }
  sink.pad_to(alignment);
  for (const GgufTensorInfo& t : file.tensors()) {
    const uint8_t* data = file.tensor_data(t);
    CHECK(data != nullptr) << "serialize: tensor '" << t.name << "' has no data loaded";
    sink.bytes(data, t.bytes);
    sink.pad_to(alignment);
  }
}

}  // namespace

std::vector<uint8_t> GgufFile::to_bytes() const {
  std::vector<uint8_t> out;
  Sink sink([&out](const void* p, size_t n) {
    const auto* b = static_cast<const uint8_t*>(p);
    out.insert(out.end(), b, b + n);
  });
  serialize(*this, sink);
  return out;
}

Status GgufFile::write(const std::string& path) const {
  for (const GgufTensorInfo& t : tensors_) {
    if (tensor_data(t) == nullptr) {
      return Status::error(path + ": cannot write: tensor '" + t.name +
                           "' has no data (file read with read_metadata_only)");
    }
  }
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) return Status::error(path + ": cannot create: " + std::strerror(errno));
  int write_errno = 0;
  Sink sink([&](const void* p, size_t n) {
    if (write_errno == 0 && std::fwrite(p, 1, n, f) != n) write_errno = errno != 0 ? errno : EIO;
  });
  serialize(*this, sink);  // streamed: large tensors are not copied
  if (std::fclose(f) != 0 && write_errno == 0) write_errno = errno != 0 ? errno : EIO;
  if (write_errno != 0) {
    std::remove(path.c_str());
    return Status::error(path + ": write failed: " + std::strerror(write_errno));
  }
  return Status::ok();
}

}  // namespace pagoda::model
