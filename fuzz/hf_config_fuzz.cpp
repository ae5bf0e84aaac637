// config.json: any text -> config_from_hf_json and kv_spec_from_hf_config give a config or a
// Status. An accepted config passes validate_config (the loader relies on it).
#include "fuzz/fuzz_util.h"
#include "model/format/hf_config.h"
#include "model/kv_spec.h"
#include "model/model_config.h"

using namespace pagoda::model;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  auto config = config_from_hf_json(text, "fuzz/config.json");
  if (config.is_ok()) {
    pagoda::Status valid = validate_config(config->model);
    if (!valid.is_ok()) pagoda::fuzz::fuzz_fail("config.json accepted but invalid:", valid.message());
  } else if (config.status().message().empty()) {
    pagoda::fuzz::fuzz_fail("config.json: error without a message");
  }
  (void)kv_spec_from_hf_config(text, "fuzz");
  return 0;
}
