// Safetensors header: any bytes -> parse_safetensors_header gives a validated header or a Status.
// A header that parses keeps its promises: tensors sorted by begin, every range inside the data
// area, element count x dtype size = range size, no two non-empty ranges overlapping.
#include "fuzz/fuzz_util.h"
#include "model/format/safetensors.h"

using namespace pagoda::model;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto header = parse_safetensors_header(data, size, "fuzz.safetensors");
  if (!header.is_ok()) return 0;
  if (header->data_offset > size) pagoda::fuzz::fuzz_fail("safetensors: data offset past the file");
  const uint64_t area = size - header->data_offset;
  uint64_t prev_end = 0, prev_begin = 0;
  for (const SafetensorsTensor& t : header->tensors) {
    if (t.begin > t.end || t.end > area) pagoda::fuzz::fuzz_fail("safetensors: range outside the data", t.name);
    if (t.begin < prev_begin) pagoda::fuzz::fuzz_fail("safetensors: tensors not sorted", t.name);
    if (t.end > t.begin && t.begin < prev_end) pagoda::fuzz::fuzz_fail("safetensors: overlapping ranges", t.name);
    const size_t elem = safetensors_dtype_size(t.dtype_name);
    if (elem == 0) pagoda::fuzz::fuzz_fail("safetensors: unknown dtype accepted", t.dtype_name);
    if (static_cast<uint64_t>(t.num_elements()) * elem != t.end - t.begin) {
      pagoda::fuzz::fuzz_fail("safetensors: size disagrees with shape", t.name);
    }
    if (t.end > t.begin) {
      const uint8_t* p = data + header->data_offset;
      (void)(p[t.begin] + p[t.end - 1]);  // readable (ASan checks)
      prev_end = t.end;
    }
    prev_begin = t.begin;
  }
  return 0;
}
