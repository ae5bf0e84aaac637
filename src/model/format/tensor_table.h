// TensorTable: the weight tensors a model binds, by GGUF tensor name ("blk.0.attn_q.weight"),
// whichever file format holds them. Entries point into memory owned by the file object the
// table was built from (GgufFile, HfCheckpoint), which must outlive the table.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/dtype.h"

namespace pagoda::model {

struct TensorRef {
  std::vector<int64_t> dims;      // ne0 first (GGUF order): a [n_out, n_in] matrix is {n_in, n_out}
  std::optional<DType> dtype;     // unset: a type Pagoda cannot compute with (see type_name)
  std::string type_name;          // "f32", "q4_K", "I8", ... for messages
  const uint8_t* data = nullptr;  // row-major, dims[0] contiguous; nullptr: header-only read
};

using TensorTable = std::map<std::string, TensorRef, std::less<>>;

}  // namespace pagoda::model
