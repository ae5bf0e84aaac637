#include "model/format/safetensors.h"

#include <algorithm>
#include <cstring>
#include <nlohmann/json.hpp>

namespace pagoda::model {

namespace {

constexpr uint64_t kMaxHeaderBytes = 100'000'000;  // the safetensors library's own limit

Status bad(const std::string& file, const std::string& what) {
  return Status::invalid_argument(file + ": bad safetensors header: " + what);
}

// One entry of the header, checked for form and size (ranges against the file come later).
Result<SafetensorsTensor> parse_entry(const std::string& file, const std::string& name, const nlohmann::json& e) {
  const std::string where = "tensor '" + name + "'";
  if (!e.is_object()) return bad(file, where + " is not an object");
  SafetensorsTensor t;
  t.name = name;
  auto dtype = e.find("dtype");
  auto shape = e.find("shape");
  auto offsets = e.find("data_offsets");
  if (dtype == e.end() || !dtype->is_string()) return bad(file, where + " has no string 'dtype'");
  if (shape == e.end() || !shape->is_array()) return bad(file, where + " has no array 'shape'");
  if (offsets == e.end() || !offsets->is_array() || offsets->size() != 2 || !(*offsets)[0].is_number_unsigned() ||
      !(*offsets)[1].is_number_unsigned()) {
    return bad(file, where + " needs 'data_offsets': [begin, end] of non-negative integers");
  }
  t.dtype_name = dtype->get<std::string>();
  const size_t elem = safetensors_dtype_size(t.dtype_name);
  if (elem == 0) return bad(file, where + " has unknown dtype '" + t.dtype_name + "'");
  if (t.dtype_name == "F32") t.dtype = DType::kF32;
  if (t.dtype_name == "F16") t.dtype = DType::kF16;
  if (t.dtype_name == "BF16") t.dtype = DType::kBF16;
  if (shape->size() > 8) return bad(file, where + " has " + std::to_string(shape->size()) + " dimensions");
  uint64_t count = 1;
  for (const auto& d : *shape) {
    if (!d.is_number_unsigned()) return bad(file, where + " has a shape entry that is not a non-negative integer");
    const uint64_t v = d.get<uint64_t>();
    if (v > (uint64_t{1} << 62) || __builtin_mul_overflow(count, v, &count)) return bad(file, where + " is too large");
    t.shape.push_back(static_cast<int64_t>(v));
  }
  uint64_t bytes = 0;
  if (__builtin_mul_overflow(count, static_cast<uint64_t>(elem), &bytes)) return bad(file, where + " is too large");
  t.begin = (*offsets)[0].get<uint64_t>();
  t.end = (*offsets)[1].get<uint64_t>();
  if (t.end < t.begin) return bad(file, where + " ends before it begins");
  if (t.end - t.begin != bytes) {
    return bad(file, where + ": " + std::to_string(count) + " " + t.dtype_name + " elements need " + std::to_string(bytes) +
                         " bytes, but data_offsets span " + std::to_string(t.end - t.begin));
  }
  return t;
}

}  // namespace

size_t safetensors_dtype_size(std::string_view d) {
  if (d == "F64" || d == "I64" || d == "U64") return 8;
  if (d == "F32" || d == "I32" || d == "U32") return 4;
  if (d == "F16" || d == "BF16" || d == "I16" || d == "U16") return 2;
  if (d == "I8" || d == "U8" || d == "BOOL" || d == "F8_E4M3" || d == "F8_E5M2" || d == "F8_E8M0") return 1;
  return 0;
}

int64_t SafetensorsTensor::num_elements() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

Result<SafetensorsHeader> parse_safetensors_header(const uint8_t* data, size_t size, const std::string& file) {
  if (size < 8) return bad(file, "file of " + std::to_string(size) + " bytes is shorter than the 8-byte header length");
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | data[i];
  if (n > kMaxHeaderBytes || n > size - 8) {
    return bad(file, "header length " + std::to_string(n) + " does not fit the file of " + std::to_string(size) + " bytes");
  }
  const char* text = reinterpret_cast<const char*>(data + 8);
  nlohmann::json json = nlohmann::json::parse(text, text + n, nullptr, /*allow_exceptions=*/false);
  if (json.is_discarded()) return bad(file, "the header is not valid JSON");
  if (!json.is_object()) return bad(file, "the header is not a JSON object");
  SafetensorsHeader h;
  h.data_offset = 8 + n;
  const uint64_t data_bytes = size - h.data_offset;
  for (const auto& [name, entry] : json.items()) {
    if (name == "__metadata__") {
      if (!entry.is_object()) return bad(file, "__metadata__ is not an object");
      for (const auto& [key, value] : entry.items()) {
        if (!value.is_string()) return bad(file, "__metadata__ value of '" + key + "' is not a string");
        h.metadata[key] = value.get<std::string>();
      }
      continue;
    }
    PAGODA_ASSIGN_OR_RETURN(SafetensorsTensor t, parse_entry(file, name, entry));
    if (t.end > data_bytes) {
      return bad(file, "tensor '" + name + "' data_offsets [" + std::to_string(t.begin) + ", " + std::to_string(t.end) +
                           ") run past the end of the data area (" + std::to_string(data_bytes) + " bytes)");
    }
    h.tensors.push_back(std::move(t));
  }
  std::sort(h.tensors.begin(), h.tensors.end(),
            [](const SafetensorsTensor& a, const SafetensorsTensor& b) { return a.begin != b.begin ? a.begin < b.begin : a.end < b.end; });
  const SafetensorsTensor* prev = nullptr;  // the non-empty tensor reaching furthest so far
  for (const SafetensorsTensor& t : h.tensors) {
    if (t.begin == t.end) continue;
    if (prev != nullptr && t.begin < prev->end) {
      return bad(file, "tensors '" + prev->name + "' and '" + t.name + "' overlap");
    }
    prev = &t;
  }
  return h;
}

Result<SafetensorsFile> SafetensorsFile::open(const std::string& path) {
  SafetensorsFile f;
  f.path_ = path;
  PAGODA_ASSIGN_OR_RETURN(f.map_, MappedFile::open(path));
  PAGODA_ASSIGN_OR_RETURN(f.header_, parse_safetensors_header(f.map_.data(), f.map_.size(), path));
  for (size_t i = 0; i < f.header_.tensors.size(); ++i) f.index_[f.header_.tensors[i].name] = i;
  return f;
}

const SafetensorsTensor* SafetensorsFile::find(std::string_view name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &header_.tensors[it->second];
}

}  // namespace pagoda::model
