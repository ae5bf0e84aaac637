// AlignedBuffer: one owned, page-aligned, zero-filled block of anonymous memory.
//
// Weights and the KV pool live here, not in a file mapping: idle file-backed pages get
// reclaimed on these machines and must then be re-read. Large buffers are advised as
// transparent huge pages. Move-only; the memory is returned on destruction.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/status.h"

namespace pagoda {

class AlignedBuffer {
 public:
  AlignedBuffer() = default;
  // prefault: touch every page now, so first use in the step loop takes no page faults.
  static Result<AlignedBuffer> allocate(size_t bytes, bool prefault = false);
  ~AlignedBuffer();
  AlignedBuffer(AlignedBuffer&& other) noexcept;
  AlignedBuffer& operator=(AlignedBuffer&& other) noexcept;
  AlignedBuffer(const AlignedBuffer&) = delete;
  AlignedBuffer& operator=(const AlignedBuffer&) = delete;

  uint8_t* data() { return data_; }
  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }

 private:
  AlignedBuffer(uint8_t* data, size_t size, size_t mapped) : data_(data), size_(size), mapped_(mapped) {}
  void release();
  uint8_t* data_ = nullptr;
  size_t size_ = 0;
  size_t mapped_ = 0;  // bytes actually mapped (size rounded up to a page)
};

}  // namespace pagoda
