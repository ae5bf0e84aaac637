// Cross-layer KV sharing (CLA): only source layers own KV blocks, and a model whose layer 1
// reads layer 0's K/V equals the same model computed without sharing when the weights make the
// two equal (layer 0 adds nothing to the residual, so layer 1 sees layer 0's input, and layer
// 1's own K/V weights are layer 0's).
#include <gtest/gtest.h>

#include <map>
#include <set>

#include "core/clock.h"
#include "core/log.h"
#include "engine/engine.h"
#include "model/model_factory.h"

namespace pagoda {
namespace {

// A copy of `src` without the tensors in `drop`, with those in `zero` zeroed and those in
// `alias` taking another tensor's bytes; metadata copied.
model::GgufFile rewrite(const model::GgufFile& src, const std::set<std::string>& drop, const std::set<std::string>& zero,
                        const std::map<std::string, std::string>& alias) {
  model::GgufFile out;
  for (const auto& [key, value] : src.metadata()) out.set(key, value);
  for (const model::GgufTensorInfo& t : src.tensors()) {
    if (drop.contains(t.name)) continue;
    const model::GgufTensorInfo* from = alias.contains(t.name) ? src.find_tensor(alias.at(t.name)) : &t;
    std::vector<uint8_t> bytes(src.tensor_data(*from), src.tensor_data(*from) + from->bytes);
    if (zero.contains(t.name)) std::fill(bytes.begin(), bytes.end(), 0);
    EXPECT_TRUE(out.add_tensor(t.name, t.dims, t.ggml_type, bytes.data(), bytes.size()).is_ok()) << t.name;
  }
  return out;
}

std::unique_ptr<engine::Engine> engine_for(model::GgufFile file, int64_t batch) {
  static ManualClock clock;
  static Logger logger(LogLevel::kSilent);
  auto model = model::LlamaModel::load(std::move(file));
  EXPECT_TRUE(model.is_ok()) << model.status().message();
  engine::EngineConfig config;
  config.num_threads = 1;
  config.block_size = 4;
  config.max_batch_tokens = batch;
  auto e = engine::Engine::create(std::move(model).value(), config, clock, logger);
  EXPECT_TRUE(e.is_ok()) << e.status().message();
  return std::move(e).value();
}

TEST(CrossLayerKv, SharedLayerEqualsUnsharedModelWithEqualWeights) {
  for (const char* arch : {"llama", "qwen2"}) {
    SCOPED_TRACE(arch);
    model::ModelShape shape = model::find_model_shape("tiny").value();
    shape.arch = arch;
    shape.n_layer = 4;
    shape.cla = 2;  // 1 reads 0, 3 reads 2
    auto shared = model::make_random_model(shape, DType::kF32, 3);
    ASSERT_TRUE(shared.is_ok()) << shared.status().message();
    EXPECT_EQ(shared->find_tensor("blk.1.attn_k.weight"), nullptr);
    EXPECT_EQ(shared->find_tensor("blk.3.attn_v.weight"), nullptr);
    // Layers 0 and 2 add nothing to the residual stream.
    const std::set<std::string> zero = {"blk.0.attn_output.weight", "blk.0.ffn_down.weight", "blk.2.attn_output.weight",
                                        "blk.2.ffn_down.weight"};
    model::GgufFile a = rewrite(*shared, {}, zero, {});
    // The unshared twin: every tensor of `a`, plus K/V weights (and qwen2 biases) for layers 1
    // and 3 equal to their source layer's.
    model::ModelShape plain_shape = shape;
    plain_shape.cla = 0;
    auto plain = model::make_random_model(plain_shape, DType::kF32, 3);
    ASSERT_TRUE(plain.is_ok());
    model::GgufFile b;
    for (const auto& [key, value] : plain->metadata()) b.set(key, value);
    for (const model::GgufTensorInfo& t : plain->tensors()) {
      std::string from = t.name;
      if (a.find_tensor(from) == nullptr) from.replace(4, 1, t.name[4] == '1' ? "0" : "2");  // blk.1. -> blk.0.
      const model::GgufTensorInfo* ti = a.find_tensor(from);
      ASSERT_NE(ti, nullptr) << from;
      ASSERT_TRUE(b.add_tensor(t.name, t.dims, t.ggml_type, a.tensor_data(*ti), ti->bytes).is_ok());
    }
    for (int64_t batch : {1, 16}) {
      auto e_shared = engine_for(rewrite(a, {}, {}, {}), batch);
      auto e_plain = engine_for(rewrite(b, {}, {}, {}), batch);
      EXPECT_EQ(e_shared->kv_layout().n_layer, 2);
      EXPECT_EQ(e_plain->kv_layout().n_layer, 4);
      EXPECT_EQ(2 * e_shared->kv_layout().bytes_per_block(), e_plain->kv_layout().bytes_per_block());
      std::vector<int32_t> tokens;
      for (int i = 0; i < 23; ++i) tokens.push_back((i * 41 + 7) % static_cast<int32_t>(shape.n_vocab));
      auto got = e_shared->score(tokens);
      auto want = e_plain->score(tokens);
      ASSERT_TRUE(got.is_ok() && want.is_ok());
      EXPECT_EQ(*got, *want) << "batch " << batch;
    }
    // And the sharing matters: with random weights everywhere, the two models differ.
    auto e_random_shared = engine_for(rewrite(*shared, {}, {}, {}), 16);
    auto e_random_plain = engine_for(rewrite(*plain, {}, {}, {}), 16);
    std::vector<int32_t> tokens = {5, 9, 200, 17, 33};
    EXPECT_NE(*e_random_shared->score(tokens), *e_random_plain->score(tokens));
  }
}

TEST(CrossLayerKv, BadSourceMapsAreRefused) {
  model::ModelShape shape = model::find_model_shape("tiny").value();
  for (const std::vector<int32_t>& bad : {std::vector<int32_t>{1, 1}, std::vector<int32_t>{0}, std::vector<int32_t>{-1, 0}}) {
    auto file = model::make_random_model(shape, DType::kF32, 3);
    ASSERT_TRUE(file.is_ok());
    file->set("llama.attention.kv_source_layer", model::GgufValue::i32_array(bad));
    auto m = model::LlamaModel::load(std::move(file).value());
    ASSERT_FALSE(m.is_ok());
    EXPECT_NE(m.status().message().find("kv_source_layer"), std::string::npos) << m.status().message();
  }
}

}  // namespace
}  // namespace pagoda
