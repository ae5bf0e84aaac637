#include "transfer/kv_transfer_params.h"

#include <gtest/gtest.h>

namespace pagoda::transfer {
namespace {

TEST(KvTransferParams, RoundTripsThroughJson) {
  KvTransferParams p;
  p.do_remote_prefill = true;
  p.remote_engine_id = "abc";
  p.remote_host = "127.0.0.1";
  p.remote_port = 4242;
  p.remote_block_ids = {3, 1, 2};
  p.remote_block_generations = {5, 6, 7};
  p.remote_lease_id = 99;
  p.remote_block_size = 16;
  p.remote_num_tokens = 48;
  auto back = parse_kv_transfer_params(kv_transfer_params_json(p));
  ASSERT_TRUE(back.is_ok()) << back.status().message();
  EXPECT_EQ(back->remote_block_ids, p.remote_block_ids);
  EXPECT_EQ(back->remote_block_generations, p.remote_block_generations);
  EXPECT_EQ(back->remote_lease_id, 99u);
  EXPECT_EQ(back->remote_port, 4242);
  p.remote_num_tokens = 37;  // the last block partly filled (the prompt's tail)
  back = parse_kv_transfer_params(kv_transfer_params_json(p));
  ASSERT_TRUE(back.is_ok()) << back.status().message();
  EXPECT_EQ(back->remote_num_tokens, 37);
}

TEST(KvTransferParams, ReadsVllmsPrefillRequest) {
  auto p = kv_transfer_params_from_body(
      R"({"prompt":"x","kv_transfer_params":{"do_remote_decode":true,"do_remote_prefill":false,)"
      R"("remote_engine_id":null,"remote_block_ids":null,"remote_host":null,"remote_port":null}})");
  ASSERT_TRUE(p.is_ok()) << p.status().message();
  ASSERT_TRUE(p->has_value());
  EXPECT_TRUE((*p)->do_remote_decode);
  auto none = kv_transfer_params_from_body(R"({"prompt":"x"})");
  ASSERT_TRUE(none.is_ok());
  EXPECT_FALSE(none->has_value());
}

TEST(KvTransferParams, RejectsMalformedFields) {
  const char* bad[] = {
      R"({"kv_transfer_params":{"do_remote_decode":"yes"}})",
      R"({"kv_transfer_params":{"do_remote_prefill":true,"remote_host":"127.0.0.1","remote_port":1,"remote_block_ids":[1],"remote_block_generations":[]}})",
      R"({"kv_transfer_params":{"do_remote_prefill":true,"remote_block_ids":[1],"remote_block_generations":[1]}})",
      R"({"kv_transfer_params":{"remote_block_ids":[-1]}})",
      R"({"kv_transfer_params":{"remote_port":70000}})",
      R"({"kv_transfer_params":{"do_remote_decode":true,"do_remote_prefill":true}})",
      R"({"kv_transfer_params":[1]})",
      // three blocks of 16 hold 33 to 48 tokens
      R"({"kv_transfer_params":{"do_remote_prefill":true,"remote_host":"h","remote_port":1,"remote_block_ids":[1,2,3],)"
      R"("remote_block_generations":[1,1,1],"remote_block_size":16,"remote_num_tokens":32}})",
      R"({"kv_transfer_params":{"do_remote_prefill":true,"remote_host":"h","remote_port":1,"remote_block_ids":[1,2,3],)"
      R"("remote_block_generations":[1,1,1],"remote_block_size":16,"remote_num_tokens":49}})",
  };
  for (const char* body : bad) EXPECT_FALSE(kv_transfer_params_from_body(body).is_ok()) << body;
}

}  // namespace
}  // namespace pagoda::transfer
