// MappedFile: one whole file mapped read-only (MAP_PRIVATE, prefaulted with MAP_POPULATE),
// unmapped on destruction. Move-only; data() stays valid across moves.
//
// Used for safetensors weights, which are computed on in place. (GGUF files are read into
// anonymous memory instead; see core/buffer.h for why. A mapped model's idle pages can be
// dropped by the kernel under memory pressure and are then re-read from the file.)
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "core/status.h"

namespace pagoda::model {

class MappedFile {
 public:
  MappedFile() = default;
  // An empty file maps to data() == nullptr, size() == 0.
  static Result<MappedFile> open(const std::string& path);
  ~MappedFile();
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  void release();
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace pagoda::model
