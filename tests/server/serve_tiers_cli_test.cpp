// `pagoda serve` with KV tiers, as a process: the start-up log names each tier's capacity; a
// server stopped with SIGTERM or killed with SIGKILL and started again on the same --kv-disk-dir
// finds a known 1,000-token prefix (cached_tokens >= 960, served from the disk tier); a flipped
// byte in the record file is a miss, counted, with output equal to cold; a kill -9 in the middle
// of writes leaves a directory the next server starts on; bad directories are start-up errors;
// /metrics with tiers passes promtool.
#include <gtest/gtest.h>
#include <httplib.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "eventually.h"
#include "kvcache/disk_tier.h"
#include "pagoda_process.h"
#include "server/serve_process.h"
#include "shell.h"

namespace pagoda::testing {
namespace {

using nlohmann::json;

struct TempDir {
  std::string path;
  TempDir() {
    std::string tmpl = "/tmp/pagoda-serve-tiers-XXXXXX";
    CHECK(::mkdtemp(tmpl.data()) != nullptr);
    path = tmpl;
  }
  ~TempDir() { std::filesystem::remove_all(path); }
};

class TierServe : public ServeProcess {
 public:
  TierServe(const std::string& dir, const std::string& extra = "")
      : ServeProcess("serve -m " + stories_dir() + "/stories260K.gguf -c 1100 --port 0 -t 1 --kv-disk-dir " + dir +
                     " --kv-disk-mem 16M " + extra) {}
};

// A known prefix of 1,000 tokens and a question after it (stories vocab: ids 3..511).
std::vector<int32_t> long_prompt() {
  std::vector<int32_t> p{1};
  for (int i = 0; i < 1000; ++i) p.push_back(3 + (i * 37 + i / 7) % 500);
  return p;
}

int64_t cached(const json& reply) { return reply["usage"]["prompt_tokens_details"]["cached_tokens"].get<int64_t>(); }
int64_t from_disk(const json& reply) {
  return reply["usage"]["prompt_tokens_details"]["cached_tokens_by_tier"]["disk"].get<int64_t>();
}

// Waits until the disk tier holds the prompt's 62 whole blocks (written through at commit).
void wait_for_disk(TierServe& serve) {
  EXPECT_TRUE(eventually([&] { return serve.metric("pagoda_kv_tier_blocks{tier=\"disk\"}") >= 62; }))
      << serve.metrics();
}

TEST(ServeTiers, StartUpLogNamesEachTierAndMetricsPassPromtool) {
  TempDir dir;
  TierServe serve(dir.path, "--kv-host-mem 8M");
  ASSERT_GT(serve.port_, 0) << serve.err();
  const std::string log = serve.err();
  EXPECT_NE(log.find("host tier: "), std::string::npos) << log;
  EXPECT_NE(log.find("disk tier: " + dir.path), std::string::npos) << log;
  EXPECT_NE(log.find(" tokens)"), std::string::npos) << log;
  serve.complete(long_prompt(), 2);
  const std::string m = serve.metrics();
  EXPECT_NE(m.find("pagoda_kv_tier_blocks_capacity{tier=\"host\"}"), std::string::npos) << m;
  EXPECT_NE(m.find("pagoda_kv_tier_load_latency_seconds_bucket{tier=\"disk\",le=\"+Inf\"}"), std::string::npos);
  const ShellRun promtool = run_shell("promtool check metrics 2>&1 <<'EOF'\n" + m + "EOF\n");
  EXPECT_EQ(promtool.exit_code, 0) << promtool.out << m;
  EXPECT_EQ(serve.terminate(), 0) << serve.err();
}

TEST(ServeTiers, RestartAfterSigtermOrSigkillFindsThePrefixOnDisk) {
  for (bool sigkill : {false, true}) {
    SCOPED_TRACE(sigkill ? "SIGKILL" : "SIGTERM");
    TempDir dir;
    const std::vector<int32_t> p = long_prompt();
    json cold;
    {
      TierServe first(dir.path);
      ASSERT_GT(first.port_, 0) << first.err();
      cold = first.complete(p);
      EXPECT_EQ(cached(cold), 0);
      wait_for_disk(first);
      if (sigkill) {
        first.kill_now();
      } else {
        EXPECT_EQ(first.terminate(), 0) << first.err();
      }
    }
    TierServe second(dir.path);
    ASSERT_GT(second.port_, 0) << second.err();
    EXPECT_NE(second.err().find("found 62 records"), std::string::npos) << second.err();
    const json warm = second.complete(p);
    EXPECT_GE(cached(warm), 960) << warm;
    EXPECT_GE(from_disk(warm), 960) << warm;
    EXPECT_EQ(warm["choices"][0]["text"], cold["choices"][0]["text"]);
    EXPECT_EQ(second.terminate(), 0) << second.err();
  }
}

TEST(ServeTiers, AFlippedByteIsAMissCountedAndOutputEqualsCold) {
  TempDir dir;
  const std::vector<int32_t> p = long_prompt();
  json cold;
  int64_t slot_bytes = 0;
  {
    TierServe first(dir.path);
    ASSERT_GT(first.port_, 0) << first.err();
    cold = first.complete(p);
    wait_for_disk(first);
    EXPECT_EQ(first.terminate(), 0);
  }
  // The record of the prefix's first block sits in the first slot: flip a payload byte of it.
  const std::string file = kvcache::disk_tier_file_path(dir.path, 0);
  ASSERT_TRUE(std::filesystem::exists(file));
  {
    FILE* f = std::fopen(file.c_str(), "r+b");
    ASSERT_NE(f, nullptr);
    kvcache::KvLayout l;  // stories260K's KV: 5 layers x 4 KV heads x 8 dims, f32, 16-token blocks
    l.n_layer = 5;
    l.n_kv_head = 4;
    l.head_dim = 8;
    slot_bytes = (kvcache::record_bytes(kvcache::record_meta_for(l)) + 4095) / 4096 * 4096;
    for (int64_t slot = 0; slot < 62; ++slot) {  // every record of the prefix: whichever is read first fails
      const long at = static_cast<long>(slot * slot_bytes + 4096);
      std::fseek(f, at, SEEK_SET);
      const int c = std::fgetc(f);
      std::fseek(f, at, SEEK_SET);
      std::fputc(c ^ 0x01, f);
    }
    std::fclose(f);
  }
  TierServe second(dir.path);
  ASSERT_GT(second.port_, 0) << second.err();
  const json warm = second.complete(p);
  EXPECT_LT(cached(warm), 16) << "a corrupt record is never used";
  EXPECT_EQ(warm["choices"][0]["text"], cold["choices"][0]["text"]);
  EXPECT_GE(second.metric("pagoda_kv_tier_corrupt_records_total{tier=\"disk\"}"), 1) << second.metrics();
  EXPECT_EQ(second.terminate(), 0);
}

TEST(ServeTiers, KillDuringWritesThenRestartServesCorrectly) {
  TempDir dir;
  const std::vector<int32_t> p = long_prompt();
  json cold;
  {
    TierServe first(dir.path);
    ASSERT_GT(first.port_, 0) << first.err();
    cold = first.complete(p);
    // More prompts, then SIGKILL at once: their records are still being written.
    std::vector<int32_t> q = p;
    for (int k = 0; k < 3; ++k) {
      q[500] = 3 + k;
      first.complete(q, 1);
    }
    first.kill_now();
  }
  TierServe second(dir.path);
  ASSERT_GT(second.port_, 0) << second.err();
  const json warm = second.complete(p);
  EXPECT_EQ(warm["choices"][0]["text"], cold["choices"][0]["text"]);
  EXPECT_EQ(second.metric("pagoda_kv_tier_corrupt_records_total{tier=\"disk\"}"), 0) << second.metrics();
  EXPECT_EQ(second.terminate(), 0);
}

TEST(ServeTiers, BadDirectoriesAreStartUpErrors) {
  TempDir dir;
  const std::string file = dir.path + "/a-file";
  std::fclose(std::fopen(file.c_str(), "w"));
  for (const std::string& bad : {dir.path + "/missing", file}) {
    const ShellRun r = run_shell(std::string(PAGODA_BIN_DIR) + "/pagoda serve -m " + stories_dir() +
                                 "/stories260K.gguf --port 0 -t 1 --kv-disk-dir " + bad + " --kv-disk-mem 1M 2>&1");
    EXPECT_NE(r.exit_code, 0) << r.out;
    EXPECT_NE(r.out.find("--kv-disk-dir"), std::string::npos) << r.out;
  }
  const ShellRun no_size = run_shell(std::string(PAGODA_BIN_DIR) + "/pagoda serve -m " + stories_dir() +
                                     "/stories260K.gguf --port 0 --kv-disk-dir " + dir.path + " 2>&1");
  EXPECT_NE(no_size.exit_code, 0);
  EXPECT_NE(no_size.out.find("needs --kv-disk-mem"), std::string::npos) << no_size.out;
}

}  // namespace
}  // namespace pagoda::testing
