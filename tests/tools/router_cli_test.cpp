// `pagoda router` and `pagoda serve --kv-events-config` refuse bad flags with a clear error
// (exit 1, nothing started).
#include <gtest/gtest.h>

#include "test_data.h"
#include "tools/run_pagoda.h"

namespace pagoda {
namespace {

using testing::Output;
using testing::pagoda;

std::string model() { return testing::stories_dir() + "/stories260K.gguf"; }

TEST(RouterCli, BadFlagsAreClearErrors) {
  Output o = pagoda("router -m " + model());
  EXPECT_NE(o.exit_code, 0);
  EXPECT_NE(o.err.find("--worker"), std::string::npos) << o.err;
  o = pagoda("router -m " + model() + " --worker 127.0.0.1:8080");
  EXPECT_EQ(o.exit_code, 1);
  EXPECT_NE(o.err.find("http://HOST:PORT"), std::string::npos) << o.err;
  o = pagoda("router -m " + model() + " --worker http://127.0.0.1:1 --policy random");
  EXPECT_NE(o.exit_code, 0);
  EXPECT_NE(o.err.find("--policy"), std::string::npos) << o.err;
  o = pagoda("router -m /nonexistent.gguf --worker http://127.0.0.1:1");
  EXPECT_EQ(o.exit_code, 1);
  EXPECT_NE(o.err.find("/nonexistent.gguf"), std::string::npos) << o.err;
}

TEST(RouterCli, ServeRefusesABadKvEventsConfig) {
  Output o = pagoda("serve -m " + model() + " --port 0 --kv-events-config '{\"enable_kv_cache_events\":tru}'");
  EXPECT_EQ(o.exit_code, 1);
  EXPECT_NE(o.err.find("--kv-events-config"), std::string::npos) << o.err;
  o = pagoda("serve -m " + model() + " --port 0 --kv-events-config '{\"enable_kv_cache_events\":true,\"endpiont\":\"tcp://*:1\"}'");
  EXPECT_EQ(o.exit_code, 1);
  EXPECT_NE(o.err.find("endpiont"), std::string::npos) << o.err;
  o = pagoda("serve -m " + model() + " --port 0 --kv-events-config '{\"enable_kv_cache_events\":true,\"endpoint\":\"tcp://*:notaport\"}'");
  EXPECT_EQ(o.exit_code, 1);
  EXPECT_NE(o.err.find("KV events endpoint"), std::string::npos) << o.err;
}

}  // namespace
}  // namespace pagoda
