#include "core/buffer.h"

#include <sys/mman.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <utility>

namespace pagoda {

Result<AlignedBuffer> AlignedBuffer::allocate(size_t bytes, bool prefault) {
  if (bytes == 0) return AlignedBuffer();
  constexpr size_t kPage = 4096;
  size_t mapped = (bytes + kPage - 1) / kPage * kPage;
  void* p = mmap(nullptr, mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    return Status::error("cannot allocate " + std::to_string(bytes) + " bytes: " + std::strerror(errno));
  }
  if (mapped >= (size_t{2} << 20)) madvise(p, mapped, MADV_HUGEPAGE);  // best effort
  if (prefault) {
    auto* bytes_ptr = static_cast<volatile uint8_t*>(p);
    for (size_t off = 0; off < mapped; off += kPage) bytes_ptr[off] = 0;
  }
  return AlignedBuffer(static_cast<uint8_t*>(p), bytes, mapped);
}

AlignedBuffer::~AlignedBuffer() { release(); }

AlignedBuffer::AlignedBuffer(AlignedBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)),
      mapped_(std::exchange(other.mapped_, 0)) {}

AlignedBuffer& AlignedBuffer::operator=(AlignedBuffer&& other) noexcept {
  if (this != &other) {
    release();
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
    mapped_ = std::exchange(other.mapped_, 0);
  }
  return *this;
}

void AlignedBuffer::release() {
  if (data_ != nullptr) munmap(data_, mapped_);
  data_ = nullptr;
  size_ = mapped_ = 0;
}

}  // namespace pagoda
