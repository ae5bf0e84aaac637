#include "model/arch/registry.h"

#include <algorithm>

#include "core/check.h"
#include "model/arch/gemma3.h"
#include "model/format/gguf.h"

namespace pagoda::model::arch {

namespace {

std::vector<ArchInfo> make_table() {
  using kernels::RopeStyle;
  std::vector<ArchInfo> t;
  {
    ArchInfo a;  // Llama 1-3, Mistral (GGUF Q/K rows permuted for adjacent pairs)
    a.gguf_name = "llama";
    a.hf_classes = {"LlamaForCausalLM", "MistralForCausalLM"};
    a.hf_model_types = {"llama", "mistral"};
    a.arch = Arch::kLlama;
    a.convert_permutes_qk = true;
    a.hf_uniform_window = true;
    a.dense_estimate = true;
    t.push_back(a);
  }
  {
    ArchInfo a;
    a.gguf_name = "qwen2";
    a.hf_classes = {"Qwen2ForCausalLM"};
    a.hf_model_types = {"qwen2"};
    a.arch = Arch::kQwen2;
    a.gguf_rope = RopeStyle::kNeoxHalves;
    a.qkv_bias = true;
    a.dense_estimate = true;
    t.push_back(a);
  }
  {
    ArchInfo a;
    a.gguf_name = "qwen3";
    a.hf_classes = {"Qwen3ForCausalLM"};
    a.hf_model_types = {"qwen3"};
    a.arch = Arch::kQwen3;
    a.gguf_rope = RopeStyle::kNeoxHalves;
    a.qk_norm = true;
    a.dense_estimate = true;
    t.push_back(a);
  }
  {
    ArchInfo a;  // llama.cpp converts its rope weights to adjacent pairs (ROPE_TYPE_NORM)
    a.gguf_name = "deepseek2";
    a.hf_model_types = {"deepseek_v2", "deepseek_v3"};
    a.arch = Arch::kDeepseek2;
    a.yarn = true;
    a.mla = true;
    t.push_back(a);
  }
  {
    ArchInfo a;  // interleaved sliding/global layers, GeGLU, four norms (arch/gemma3.h)
    a.gguf_name = "gemma3";
    a.hf_classes = {"Gemma3ForCausalLM"};
    a.hf_model_types = {"gemma3_text"};
    a.arch = Arch::kGemma3;
    a.gguf_rope = RopeStyle::kNeoxHalves;
    a.qk_norm = true;
    a.read_gguf = read_gemma3_gguf;
    a.write_random = make_random_gemma3_model;
    a.default_sliding_pattern = 6;
    a.dense_estimate = true;
    a.four_norms = true;
    a.tied_by_default = true;
    t.push_back(a);
  }
  {
    ArchInfo a;  // qwen3's attention, a mixture-of-experts FFN in every layer (model/moe.h)
    a.gguf_name = "qwen3moe";
    a.hf_classes = {"Qwen3MoeForCausalLM"};
    a.hf_model_types = {"qwen3_moe"};
    a.arch = Arch::kQwen3Moe;
    a.gguf_rope = RopeStyle::kNeoxHalves;
    a.qk_norm = true;
    a.moe = true;
    t.push_back(a);
  }
  // Known to kvcalc only.
  {
    ArchInfo a;
    a.hf_model_types = {"gemma"};
    a.gguf_name = "gemma";
    a.dense_estimate = true;
    a.tied_by_default = true;
    t.push_back(a);
  }
  {
    ArchInfo a;
    a.gguf_name = "gemma2";
    a.hf_model_types = {"gemma2"};
    a.default_sliding_pattern = 2;
    a.dense_estimate = true;
    a.four_norms = true;
    a.tied_by_default = true;
    t.push_back(a);
  }
  {
    ArchInfo a;
    a.gguf_name = "cohere2";
    a.default_sliding_pattern = 4;
    t.push_back(a);
  }
  return t;
}

template <typename Pred>
const ArchInfo* find_if(Pred pred) {
  const auto& t = architectures();
  auto it = std::find_if(t.begin(), t.end(), pred);
  return it == t.end() ? nullptr : &*it;
}

bool contains(const std::vector<std::string_view>& names, std::string_view name) {
  return std::find(names.begin(), names.end(), name) != names.end();
}

}  // namespace

const std::vector<ArchInfo>& architectures() {
  static const std::vector<ArchInfo> table = make_table();  // immutable after first use
  return table;
}

const ArchInfo* find_gguf(std::string_view gguf_name) {
  if (gguf_name.empty()) return nullptr;
  return find_if([&](const ArchInfo& a) { return a.gguf_name == gguf_name; });
}

const ArchInfo* find_hf_class(std::string_view hf_class) {
  return find_if([&](const ArchInfo& a) { return contains(a.hf_classes, hf_class); });
}

const ArchInfo* find_hf_model_type(std::string_view model_type) {
  return find_if([&](const ArchInfo& a) { return contains(a.hf_model_types, model_type); });
}

const ArchInfo& info(Arch arch) {
  const ArchInfo* a = find_if([&](const ArchInfo& e) { return e.arch == arch; });
  CHECK(a != nullptr) << "no registry entry for arch " << static_cast<int>(arch);
  return *a;
}

std::string runnable_gguf_names() {
  std::string out;
  for (const ArchInfo& a : architectures()) {
    if (a.arch && !a.gguf_name.empty()) out += (out.empty() ? "" : ", ") + std::string(a.gguf_name);
  }
  return out;
}

std::string runnable_hf_classes() {
  std::string out;
  for (const ArchInfo& a : architectures()) {
    if (!a.arch) continue;
    for (std::string_view c : a.hf_classes) out += (out.empty() ? "" : ", ") + std::string(c);
  }
  return out;
}

Result<const ArchInfo*> check_runnable(const GgufFile& header) {
  auto name = header.get_string("general.architecture");
  if (!name.has_value()) return Status::error("missing metadata key 'general.architecture'");
  const ArchInfo* a = find_gguf(*name);
  if (a == nullptr || !a->arch) {
    return Status::invalid_argument("unsupported architecture '" + *name + "' (supported: " + runnable_gguf_names() +
                                    ")");
  }
  return a;
}

}  // namespace pagoda::model::arch
