// Safetensors files (Hugging Face weights), mapped and validated.
//
// Layout: u64 little-endian N, then N bytes of JSON
//   {"NAME": {"dtype": "BF16", "shape": [d0, d1, ...], "data_offsets": [begin, end]}, ...,
//    "__metadata__": {"key": "string value", ...}}   (optional)
// then the data area; begin/end are byte offsets into the data area, shapes are row-major
// (outermost first, so a PyTorch Linear weight is [out_features, in_features]).
//
// Reading trusts nothing: N must fit the file (and be at most 100 MB), the JSON must parse to
// an object of well-formed entries, every dtype must be known, elements x dtype size must
// equal end - begin (without overflow), every range must lie in the data area, and no two
// non-empty ranges may overlap. Any violation is one Status naming the file and the tensor.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"
#include "model/format/mapped_file.h"

namespace pagoda::model {

struct SafetensorsTensor {
  std::string name;
  std::string dtype_name;       // as in the header: "F32", "BF16", "I8", ...
  std::optional<DType> dtype;   // set for F32, F16, BF16 (what Pagoda computes with)
  std::vector<int64_t> shape;   // outermost first; {} is a scalar
  uint64_t begin = 0, end = 0;  // byte range in the data area
  int64_t num_elements() const;
};

// Bytes per element of a safetensors dtype name ("F32" -> 4), 0 if unknown.
size_t safetensors_dtype_size(std::string_view dtype_name);

struct SafetensorsHeader {
  std::vector<SafetensorsTensor> tensors;          // sorted by begin
  std::map<std::string, std::string> metadata;    // "__metadata__"
  uint64_t data_offset = 0;                        // 8 + N
};

// Validates the header of the `size` bytes at `data` (the whole file); `name` is used in errors.
Result<SafetensorsHeader> parse_safetensors_header(const uint8_t* data, size_t size, const std::string& name);

// A mapped safetensors file. Move-only; tensor data pointers stay valid across moves.
class SafetensorsFile {
 public:
  static Result<SafetensorsFile> open(const std::string& path);

  const std::string& path() const { return path_; }
  const std::vector<SafetensorsTensor>& tensors() const { return header_.tensors; }
  const std::map<std::string, std::string>& metadata() const { return header_.metadata; }
  const SafetensorsTensor* find(std::string_view name) const;
  // end - begin bytes; `t` must be an element of tensors().
  const uint8_t* tensor_data(const SafetensorsTensor& t) const { return map_.data() + header_.data_offset + t.begin; }

 private:
  std::string path_;
  MappedFile map_;
  SafetensorsHeader header_;
  std::map<std::string, size_t, std::less<>> index_;  // name -> index in tensors()
};

}  // namespace pagoda::model
