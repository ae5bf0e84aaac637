// Internal to model/: binding named tensors of a TensorTable (GGUF or safetensors) to weights,
// with errors that name the tensor and the shape it should have.
#pragma once

#include <string>
#include <vector>

#include "core/status.h"
#include "kernels/matmul.h"
#include "model/format/tensor_table.h"

namespace pagoda::model {

// The tensor `name` with exactly `dims` (GGUF order: dims[0] is the row length), of a dtype
// Pagoda computes with.
Result<const TensorRef*> find_tensor(const TensorTable& tensors, const std::string& name, std::vector<int64_t> dims);
// A [n_out, n_in] matrix used in place.
Result<kernels::WeightView> bind_matrix(const TensorTable& tensors, const std::string& name, int64_t n_out, int64_t n_in);
// A 1-D f32/f16/bf16 tensor of n values, converted to f32.
Result<std::vector<float>> load_vector(const TensorTable& tensors, const std::string& name, int64_t n);

}  // namespace pagoda::model
