// LlamaModel::round_f16_weights_to_bf16 (EngineConfig::batched_bf16, --batched-bf16): every F16
// weight matrix becomes BF16 in place, each value rounded once to nearest even; a tied output
// is rounded once with the embeddings it shares; other dtypes are left as they are.
#include "model/llama_model.h"

#include <gtest/gtest.h>

#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <vector>

#include "hf_writer.h"
#include "model/model_factory.h"

namespace pagoda::model {
namespace {

const ModelShape kShape{"t", 64, 2, 4, 2, 96, 300, 64};

std::vector<uint16_t> copy_of(const kernels::WeightView& w) {
  std::vector<uint16_t> out(static_cast<size_t>(w.n_out * w.n_in));
  std::memcpy(out.data(), w.data, out.size() * 2);
  return out;
}

TEST(LlamaModel, RoundsF16WeightsToBf16InPlace) {
  auto file = make_random_model(kShape, DType::kF16, 5);
  ASSERT_TRUE(file.is_ok()) << file.status().message();
  auto loaded = LlamaModel::load(std::move(file).value());
  ASSERT_TRUE(loaded.is_ok()) << loaded.status().message();
  LlamaModel& model = *loaded.value();
  std::vector<const kernels::WeightView*> views = {&model.token_embedding(), &model.output()};
  for (int64_t l = 0; l < kShape.n_layer; ++l) {
    const LayerWeights& w = model.layer(l);
    for (const auto* m : {&w.wq, &w.wk, &w.wv, &w.wo, &w.w_gate, &w.w_up, &w.w_down}) views.push_back(m);
  }
  std::vector<std::vector<uint16_t>> before;
  std::vector<const void*> data;
  for (const auto* v : views) {
    ASSERT_EQ(v->dtype, DType::kF16);
    before.push_back(copy_of(*v));
    data.push_back(v->data);
  }
  ASSERT_TRUE(model.round_f16_weights_to_bf16().is_ok());
  for (size_t i = 0; i < views.size(); ++i) {
    SCOPED_TRACE("matrix " + std::to_string(i));
    EXPECT_EQ(views[i]->dtype, DType::kBF16);
    EXPECT_EQ(views[i]->data, data[i]);  // in place
    const std::vector<uint16_t> after = copy_of(*views[i]);
    for (size_t j = 0; j < after.size(); ++j) {
      ASSERT_EQ(after[j], fp32_to_bf16(fp16_to_fp32(before[i][j]))) << "value " << j;
    }
  }
  // Nothing F16 is left: a second call changes nothing.
  const std::vector<uint16_t> once = copy_of(model.output());
  ASSERT_TRUE(model.round_f16_weights_to_bf16().is_ok());
  EXPECT_EQ(copy_of(model.output()), once);
}

TEST(LlamaModel, RoundingLeavesOtherDtypesAlone) {
  for (DType dtype : {DType::kF32, DType::kQ8_0}) {
    auto loaded = LlamaModel::load(make_random_model(kShape, dtype, 5).value());
    ASSERT_TRUE(loaded.is_ok()) << loaded.status().message();
    LlamaModel& model = *loaded.value();
    const kernels::WeightView& wq = model.layer(0).wq;
    std::vector<uint8_t> bytes(wq.row_bytes() * wq.n_out);
    std::memcpy(bytes.data(), wq.data, bytes.size());
    ASSERT_TRUE(model.round_f16_weights_to_bf16().is_ok());
    EXPECT_EQ(wq.dtype, dtype);
    EXPECT_EQ(std::memcmp(bytes.data(), wq.data, bytes.size()), 0);
  }
}

// A Hugging Face folder's tensors are mapped read-only: F16 ones cannot be rounded in place,
// which is an error that leaves the weights as they were.
TEST(LlamaModel, RoundingAHuggingFaceFoldersF16WeightsIsAnError) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("pagoda-llama-model-test-" + std::to_string(getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  auto gguf = make_random_model(kShape, DType::kF32, 5);
  ASSERT_TRUE(gguf.is_ok());
  testing::write_hf_folder(*gguf, dir.string(), {.dtype = "F16"});
  auto checkpoint = HfCheckpoint::open(dir.string());
  ASSERT_TRUE(checkpoint.is_ok()) << checkpoint.status().message();
  auto loaded = LlamaModel::load(std::move(checkpoint).value());
  ASSERT_TRUE(loaded.is_ok()) << loaded.status().message();
  LlamaModel& model = *loaded.value();
  ASSERT_EQ(model.layer(0).wq.dtype, DType::kF16);
  const std::vector<uint16_t> before = copy_of(model.layer(0).wq);
  const Status rounded = model.round_f16_weights_to_bf16();
  EXPECT_FALSE(rounded.is_ok());
  EXPECT_NE(rounded.message().find("GGUF"), std::string::npos) << rounded.message();
  EXPECT_EQ(model.layer(0).wq.dtype, DType::kF16);
  EXPECT_EQ(copy_of(model.layer(0).wq), before);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace pagoda::model
