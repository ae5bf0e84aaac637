// Hugging Face folders: config.json + safetensors (single and sharded, F32/F16/BF16) open
// into a TensorTable that points into the mapped files, bind into a LlamaModel, and every
// broken folder gives an error.
#include "model/format/hf_checkpoint.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <functional>

#include "hf_writer.h"
#include "kernels/quant.h"
#include "model/llama_model.h"
#include "model/model_factory.h"
#include "test_data.h"

namespace pagoda::model {
namespace {

namespace fs = std::filesystem;

std::string fresh_dir(const std::string& name) {
  const auto dir = fs::temp_directory_path() / ("pagoda-hf-test-" + std::to_string(getpid())) / name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir.string();
}

const ModelShape kShape{"t", 64, 2, 4, 2, 96, 300, 128};

std::vector<float> values(const TensorRef& t) {
  int64_t n = 1;
  for (int64_t d : t.dims) n *= d;
  std::vector<float> v(n);
  kernels::dequantize_row(*t.dtype, t.data, v.data(), n);
  return v;
}

std::vector<float> values(const GgufFile& f, const std::string& name) {
  const GgufTensorInfo* t = f.find_tensor(name);
  std::vector<float> v(t->num_elements());
  kernels::dequantize_row(*t->dtype, f.tensor_data(*t), v.data(), t->num_elements());
  return v;
}

TEST(HfCheckpoint, NameMap) {
  EXPECT_EQ(gguf_name_from_hf("model.embed_tokens.weight"), "token_embd.weight");
  EXPECT_EQ(gguf_name_from_hf("lm_head.weight"), "output.weight");
  EXPECT_EQ(gguf_name_from_hf("model.layers.12.self_attn.k_norm.weight"), "blk.12.attn_k_norm.weight");
  EXPECT_EQ(gguf_name_from_hf("model.layers.0.mlp.down_proj.weight"), "blk.0.ffn_down.weight");
  EXPECT_EQ(gguf_name_from_hf("model.layers.3.self_attn.v_proj.bias"), "blk.3.attn_v.bias");
  EXPECT_EQ(gguf_name_from_hf("model.layers.3.self_attn.rotary_emb.inv_freq"), std::nullopt);
  EXPECT_EQ(gguf_name_from_hf("model.layers.x.mlp.up_proj.weight"), std::nullopt);
  EXPECT_EQ(gguf_name_from_hf("model.layers.01.mlp.up_proj.weight"), std::nullopt);
  EXPECT_EQ(gguf_name_from_hf("model.layers.1"), std::nullopt);
}

TEST(HfCheckpoint, SingleAndShardedFoldersMapEveryTensorInPlace) {
  auto gguf = make_random_model(kShape, DType::kF32, 7);
  ASSERT_TRUE(gguf.is_ok());
  for (const char* dtype : {"F32", "F16", "BF16"}) {
    for (int shards : {1, 3}) {
      SCOPED_TRACE(std::string(dtype) + " shards " + std::to_string(shards));
      const std::string dir = fresh_dir(std::string("folder-") + dtype + std::to_string(shards));
      testing::write_hf_folder(*gguf, dir, {.dtype = dtype, .shards = shards});
      auto ck = HfCheckpoint::open(dir);
      ASSERT_TRUE(ck.is_ok()) << ck.status().message();
      EXPECT_EQ(ck->files().size(), static_cast<size_t>(shards));
      EXPECT_EQ(ck->num_copied_tensors(), 0);
      EXPECT_EQ(ck->tensors().size(), gguf->tensors().size());
      EXPECT_EQ(ck->config().model.n_embd, 64);
      EXPECT_EQ(ck->config().model.n_kv_head, 2);
      for (const GgufTensorInfo& t : gguf->tensors()) {
        SCOPED_TRACE(t.name);
        auto it = ck->tensors().find(t.name);
        ASSERT_NE(it, ck->tensors().end());
        EXPECT_EQ(it->second.dims, t.dims);  // reversed back to GGUF order
        EXPECT_EQ(it->second.type_name, dtype);
        // In place: the entry points into one of the mapped files.
        bool in_file = false;
        for (const SafetensorsFile& f : ck->files()) {
          if (const SafetensorsTensor* st = f.find(testing::hf_name_from_gguf(t.name))) {
            in_file |= f.tensor_data(*st) == it->second.data;
          }
        }
        EXPECT_TRUE(in_file);
        if (t.name.ends_with("attn_q.weight") || t.name.ends_with("attn_k.weight")) continue;  // permuted
        const std::vector<float> want = values(*gguf, t.name), got = values(it->second);
        const double tol = std::string(dtype) == "F32" ? 0 : std::string(dtype) == "F16" ? 1e-3 : 1e-2;
        for (size_t i = 0; i < want.size(); ++i) ASSERT_NEAR(got[i], want[i], tol * (1 + std::fabs(want[i]))) << i;
      }
      const uint64_t digest = ck->weights_digest();
      auto model = LlamaModel::load(std::move(ck).value());
      ASSERT_TRUE(model.is_ok()) << model.status().message();
      const GgufFile& meta = model.value()->file();
      EXPECT_EQ(meta.get_string("general.architecture"), "llama");
      EXPECT_EQ(meta.get_int("llama.attention.key_length"), 16);
      ASSERT_NE(meta.find("pagoda.weights_digest"), nullptr);
      EXPECT_EQ(meta.find("pagoda.weights_digest")->scalar_bits(), digest);
      EXPECT_TRUE(meta.tensors().empty());
      EXPECT_EQ(model.value()->config().rope.style, kernels::RopeStyle::kNeoxHalves);
    }
  }
}

TEST(HfCheckpoint, TiedEmbeddingsAndDigest) {
  auto gguf = make_random_model(kShape, DType::kF32, 7);
  const std::string dir = fresh_dir("tied");
  testing::write_hf_folder(*gguf, dir, {.tie = true});
  auto ck = HfCheckpoint::open(dir);
  ASSERT_TRUE(ck.is_ok()) << ck.status().message();
  EXPECT_FALSE(ck->tensors().contains("output.weight"));
  const uint64_t digest = ck->weights_digest();
  auto model = LlamaModel::load(std::move(ck).value());
  ASSERT_TRUE(model.is_ok()) << model.status().message();
  EXPECT_EQ(model.value()->output().data, model.value()->token_embedding().data);

  auto other = make_random_model(kShape, DType::kF32, 8);
  const std::string dir2 = fresh_dir("tied-other-seed");
  testing::write_hf_folder(*other, dir2, {.tie = true});
  auto ck2 = HfCheckpoint::open(dir2);
  ASSERT_TRUE(ck2.is_ok());
  EXPECT_NE(ck2->weights_digest(), digest);
  auto ck3 = HfCheckpoint::open(dir);
  EXPECT_EQ(ck3->weights_digest(), digest);
}

TEST(HfCheckpoint, MisalignedTensorsAreCopied) {
  const std::string dir = fresh_dir("misaligned");
  auto gguf = make_random_model(kShape, DType::kF32, 7);
  testing::write_hf_folder(*gguf, dir);
  // Rewrite model.safetensors with the data area shifted by 2 bytes.
  auto st = SafetensorsFile::open(dir + "/model.safetensors");
  ASSERT_TRUE(st.is_ok());
  std::vector<testing::StTensor> tensors;
  for (const SafetensorsTensor& t : st->tensors()) {
    const uint8_t* d = st->tensor_data(t);
    tensors.push_back({t.name, t.dtype_name, t.shape, std::vector<uint8_t>(d, d + (t.end - t.begin))});
  }
  testing::write_bytes(dir + "/model.safetensors", testing::safetensors_bytes(tensors, {}, 2));
  auto ck = HfCheckpoint::open(dir);
  ASSERT_TRUE(ck.is_ok()) << ck.status().message();
  EXPECT_EQ(ck->num_copied_tensors(), static_cast<int64_t>(tensors.size()));
  EXPECT_EQ(values(ck->tensors().at("blk.1.ffn_up.weight")), values(*gguf, "blk.1.ffn_up.weight"));
}

TEST(HfCheckpoint, BrokenFoldersGiveErrors) {
  auto gguf = make_random_model(kShape, DType::kF32, 7);
  struct Case {
    const char* label;
    int shards;
    std::function<void(const std::string&)> breakit;
    const char* expect;
  };
  const std::string shard1 = "/model-00001-of-00002.safetensors";
  auto edit_json = [](const std::string& path, const std::function<void(nlohmann::json&)>& f) {
    auto j = nlohmann::json::parse(testing::read_file_or_empty(path));
    f(j);
    testing::write_text(path, j.dump());
  };
  const std::vector<Case> cases = {
      {"no config.json", 1, [](const std::string& d) { fs::remove(d + "/config.json"); }, "config.json: cannot open"},
      {"config not JSON", 1, [](const std::string& d) { testing::write_text(d + "/config.json", "{"); }, "not valid JSON"},
      {"no weights", 1, [](const std::string& d) { fs::remove(d + "/model.safetensors"); }, "no model.safetensors"},
      {"corrupt weights", 1, [](const std::string& d) { testing::write_text(d + "/model.safetensors", "xx"); },
       "bad safetensors header"},
      {"missing shard", 2, [&](const std::string& d) { fs::remove(d + shard1); }, "cannot open"},
      {"index names a missing tensor", 2,
       [&](const std::string& d) {
         edit_json(d + "/model.safetensors.index.json",
                   [&](nlohmann::json& j) { j["weight_map"]["model.layers.0.mlp.extra.weight"] = shard1.substr(1); });
       },
       "has no tensor 'model.layers.0.mlp.extra.weight'"},
      {"index escapes the folder", 2,
       [&](const std::string& d) {
         edit_json(d + "/model.safetensors.index.json",
                   [](nlohmann::json& j) { j["weight_map"]["model.norm.weight"] = "../model.safetensors"; });
       },
       "not a file name inside the folder"},
      {"index without weight_map", 2,
       [&](const std::string& d) { testing::write_text(d + "/model.safetensors.index.json", R"({"metadata": {}})"); },
       "no 'weight_map'"},
      {"index value not a string", 2,
       [&](const std::string& d) {
         edit_json(d + "/model.safetensors.index.json", [](nlohmann::json& j) { j["weight_map"]["model.norm.weight"] = 3; });
       },
       "is not a file name"},
      {"unexpected tensor", 1,
       [&](const std::string& d) {
         auto f = SafetensorsFile::open(d + "/model.safetensors");
         std::vector<testing::StTensor> ts;
         for (const SafetensorsTensor& t : f->tensors()) {
           const uint8_t* p = f->tensor_data(t);
           ts.push_back({t.name, t.dtype_name, t.shape, std::vector<uint8_t>(p, p + (t.end - t.begin))});
         }
         ts.push_back({"model.layers.0.self_attn.o_proj.bias", "F32", {64}, std::vector<uint8_t>(256)});
         ts.push_back({"model.layers.0.self_attn.rotary_emb.inv_freq", "F32", {8}, std::vector<uint8_t>(32)});
         f = Status::error("closed");
         testing::write_bytes(d + "/model.safetensors", testing::safetensors_bytes(ts));
       },
       "unexpected tensor 'model.layers.0.self_attn.o_proj.bias'"},
      {"no lm_head, not tied", 1,
       [&](const std::string& d) {
         auto f = SafetensorsFile::open(d + "/model.safetensors");
         std::vector<testing::StTensor> ts;
         for (const SafetensorsTensor& t : f->tensors()) {
           if (t.name == "lm_head.weight") continue;
           const uint8_t* p = f->tensor_data(t);
           ts.push_back({t.name, t.dtype_name, t.shape, std::vector<uint8_t>(p, p + (t.end - t.begin))});
         }
         f = Status::error("closed");
         testing::write_bytes(d + "/model.safetensors", testing::safetensors_bytes(ts));
       },
       "no lm_head.weight"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.label);
    const std::string dir = fresh_dir("broken");
    testing::write_hf_folder(*gguf, dir, {.shards = c.shards});
    c.breakit(dir);
    auto ck = HfCheckpoint::open(dir);
    ASSERT_FALSE(ck.is_ok());
    EXPECT_NE(ck.status().message().find(c.expect), std::string::npos) << ck.status().message();
  }
}

// Folders that open but do not fit the config fail when the model binds them.
TEST(HfCheckpoint, ShapesAndTypesMustMatchTheConfig) {
  auto gguf = make_random_model(kShape, DType::kF32, 7);
  struct Case {
    const char* label;
    nlohmann::json patch;
    std::string dtype;
    const char* expect;
  };
  const std::vector<Case> cases = {
      {"wider config", {{"intermediate_size", 128}}, "F32", "tensor 'blk.0.ffn_gate.weight' has shape [64 x 96], expected [64 x 128]"},
      {"more layers", {{"num_hidden_layers", 3}}, "F32", "missing tensor 'blk.2.attn_norm.weight'"},
      {"qwen3 without q/k norms", {{"architectures", {"Qwen3ForCausalLM"}}}, "F32", "missing tensor 'blk.0.attn_q_norm.weight'"},
      {"qwen2 without biases", {{"architectures", {"Qwen2ForCausalLM"}}}, "F32", "missing tensor 'blk.0.attn_q.bias'"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.label);
    const std::string dir = fresh_dir("shape");
    testing::write_hf_folder(*gguf, dir, {.dtype = c.dtype, .extra_config = c.patch});
    auto ck = HfCheckpoint::open(dir);
    ASSERT_TRUE(ck.is_ok()) << ck.status().message();
    auto model = LlamaModel::load(std::move(ck).value());
    ASSERT_FALSE(model.is_ok());
    EXPECT_NE(model.status().message().find(c.expect), std::string::npos) << model.status().message();
    EXPECT_NE(model.status().message().find(dir), std::string::npos) << model.status().message();
  }
  // A dtype Pagoda does not compute with.
  const std::string dir = fresh_dir("int8");
  testing::write_hf_folder(*gguf, dir, {.tie = true});
  testing::write_bytes(dir + "/model.safetensors",
                       testing::safetensors_bytes({{"model.embed_tokens.weight", "I8", {300, 64}, std::vector<uint8_t>(300 * 64)}}));
  auto ck = HfCheckpoint::open(dir);
  ASSERT_TRUE(ck.is_ok()) << ck.status().message();
  auto model = LlamaModel::load(std::move(ck).value());
  ASSERT_FALSE(model.is_ok());
  EXPECT_NE(model.status().message().find("type I8, which Pagoda cannot compute with"), std::string::npos)
      << model.status().message();
}

}  // namespace
}  // namespace pagoda::model
