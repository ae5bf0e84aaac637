// Two UcxAgents in one process over loopback TCP and over shared memory: blocks of every KV
// format (odd shapes) pulled byte for byte, refusals and failures, no bytes after a refusal.
#include "transfer/ucx_agent.h"

#include <gtest/gtest.h>

#include <random>

#include "transfer/wire.h"

namespace pagoda::transfer {
namespace {

using Options = std::vector<std::pair<std::string, std::string>>;
const Options kTcp = {{"TLS", "tcp,self"}, {"NET_DEVICES", "lo"}};
// sm for the data; tcp only for the connection manager (the sockaddr listener needs it).
const Options kSm = {{"TLS", "sm,self,tcp"}, {"NET_DEVICES", "lo"}};

kvcache::KvLayout layout_of(kernels::KvDType dtype, kernels::KvLayoutKind kind, int64_t block_size) {
  kvcache::KvLayout l;
  l.n_layer = 3;
  l.n_kv_head = kind == kernels::KvLayoutKind::kNZ ? 2 : 3;
  l.head_dim = kind == kernels::KvLayoutKind::kNZ ? 24 : 10;  // odd-sized blocks
  l.block_size = block_size;
  l.dtype = dtype;
  l.layout = kind;
  return l;
}

struct Instance {
  Instance(const kvcache::KvLayout& layout, int64_t num_blocks, const Options& options, uint64_t fingerprint = 7)
      : pool(kvcache::BlockPool::create(layout, num_blocks).value()), leases(num_blocks, lease_clock, 1'000'000'000) {
    UcxAgentConfig config;
    config.ucx_options = options;
    auto created = UcxAgent::create(config, describe_pool(pool, "engine", fingerprint, 11), &leases, clock, logger);
    EXPECT_TRUE(created.is_ok()) << created.status().message();
    if (created.is_ok()) agent = std::move(created).value();
  }
  std::vector<uint8_t> block_bytes(int32_t block) {
    std::vector<std::span<uint8_t>> segs(2 * pool.layout().n_layer);
    pool.block_segments(block, segs);
    std::vector<uint8_t> out;
    for (auto s : segs) out.insert(out.end(), s.begin(), s.end());
    return out;
  }
  void fill(int32_t block, uint32_t seed) {
    std::vector<std::span<uint8_t>> segs(2 * pool.layout().n_layer);
    pool.block_segments(block, segs);
    std::mt19937 rng(seed);
    for (auto s : segs) {
      for (uint8_t& b : s) b = static_cast<uint8_t>(rng());
    }
  }
  SteadyClock clock;
  ManualClock lease_clock;
  Logger logger{LogLevel::kWarn};
  kvcache::BlockPool pool;
  LeaseTable leases;
  std::unique_ptr<UcxAgent> agent;
};

PullRequest request_for(const Instance& from, const Lease& lease, std::span<const int32_t> local) {
  PullRequest r;
  r.host = from.agent->host();
  r.port = from.agent->port();
  r.lease_id = lease.id;
  for (size_t i = 0; i < lease.blocks.size(); ++i) r.blocks.push_back({lease.blocks[i], local[i]});
  r.timeout_s = 20;  // a safety net; the pulls finish in milliseconds
  return r;
}

// `rma`: a transport the gets must take (a substring of PullResult::rma_transports), and
// `not_rma` one they must not: the shared-memory run fails if UCX falls back to tcp for them.
void pull_every_format(const Options& options, const std::string& rma, const std::string& not_rma) {
  using kernels::KvDType;
  using kernels::KvLayoutKind;
  struct Case { KvDType dtype; KvLayoutKind kind; int64_t block_size; };
  const Case cases[] = {{KvDType::kF32, KvLayoutKind::kND, 7},  {KvDType::kF16, KvLayoutKind::kND, 5},
                        {KvDType::kBF16, KvLayoutKind::kND, 3}, {KvDType::kFp8E4M3, KvLayoutKind::kND, 9},
                        {KvDType::kFp8E5M2, KvLayoutKind::kND, 1}, {KvDType::kInt8, KvLayoutKind::kND, 11},
                        {KvDType::kInt4, KvLayoutKind::kND, 13}, {KvDType::kF32, KvLayoutKind::kNZ, 16},
                        {KvDType::kBF16, KvLayoutKind::kNZ, 32}};
  for (const Case& c : cases) {
    SCOPED_TRACE(std::string(kernels::kv_dtype_name(c.dtype)) + " " + std::string(kernels::kv_layout_name(c.kind)));
    const kvcache::KvLayout layout = layout_of(c.dtype, c.kind, c.block_size);
    Instance prefill(layout, 12, options), decode(layout, 10, options);
    ASSERT_NE(prefill.agent, nullptr);
    ASSERT_NE(decode.agent, nullptr);
    // A run (4, 5, 6), a lone block and a block before its neighbour: runs and single gets.
    const int32_t remote[] = {4, 5, 6, 9, 1, 0};
    const int32_t local[] = {2, 3, 4, 7, 0, 9};
    for (int32_t b : remote) prefill.fill(b, 1000 + b);
    const Lease lease = prefill.leases.grant(remote);
    const PullResult r = decode.agent->pull(request_for(prefill, lease, local));
    ASSERT_TRUE(r.status.is_ok()) << r.status.message();
    EXPECT_EQ(r.bytes, 6 * layout.bytes_per_block());
    EXPECT_EQ(r.num_gets, 4 * 2 * layout.n_layer);  // runs {4,5,6}, {9}, {1}, {0}
    EXPECT_NE(r.rma_transports.find(rma), std::string::npos) << r.rma_transports;
    EXPECT_EQ(r.rma_transports.find(not_rma), std::string::npos) << r.rma_transports;
    for (size_t i = 0; i < 6; ++i) EXPECT_EQ(decode.block_bytes(local[i]), prefill.block_bytes(remote[i])) << i;
    EXPECT_EQ(prefill.leases.stats().confirmed, 1);
    EXPECT_EQ(prefill.leases.take_ended().size(), 1u);
    EXPECT_EQ(prefill.leases.stats().held, 0);
  }
}

TEST(UcxAgent, PullsEveryKvFormatOverTcp) { pull_every_format(kTcp, "tcp/", "/memory"); }
TEST(UcxAgent, PullsEveryKvFormatOverSharedMemory) { pull_every_format(kSm, "/memory", "tcp/"); }

TEST(UcxAgent, ExpiredLeaseIsRefused) {
  const auto layout = layout_of(kernels::KvDType::kF16, kernels::KvLayoutKind::kND, 4);
  Instance prefill(layout, 6, kTcp), decode(layout, 6, kTcp);
  ASSERT_NE(prefill.agent, nullptr);
  const int32_t remote[] = {1, 2}, local[] = {3, 4};
  const Lease lease = prefill.leases.grant(remote);
  prefill.lease_clock.advance_ns(prefill.leases.ttl_ns());  // the decode side came too late
  const PullResult r = decode.agent->pull(request_for(prefill, lease, local));
  EXPECT_FALSE(r.status.is_ok());
  EXPECT_EQ(r.bytes, 0);
  EXPECT_EQ(prefill.leases.stats().refused, 1);
  // The same agent pulls again afterwards (the endpoint survives a refusal).
  const Lease fresh = prefill.leases.grant(remote);
  EXPECT_TRUE(decode.agent->pull(request_for(prefill, fresh, local)).status.is_ok());
}

TEST(UcxAgent, StaleReferenceIsRefused) {
  const auto layout = layout_of(kernels::KvDType::kInt8, kernels::KvLayoutKind::kND, 4);
  Instance prefill(layout, 6, kTcp), decode(layout, 6, kTcp);
  ASSERT_NE(prefill.agent, nullptr);
  const int32_t remote[] = {2}, local[] = {1};
  const Lease old_lease = prefill.leases.grant(remote);
  ASSERT_TRUE(prefill.leases.confirm(old_lease.id, old_lease.blocks).is_ok());
  prefill.leases.take_ended();
  const Lease reused = prefill.leases.grant(remote);  // block 2 was reused for another prompt
  PullRequest stale = request_for(prefill, reused, local);
  stale.blocks[0].remote = old_lease.blocks[0];        // a reference from before the reuse
  const PullResult r = decode.agent->pull(stale);
  EXPECT_EQ(r.status.code(), StatusCode::kInvalidArgument) << r.status.message();
}

TEST(UcxAgent, IncompatiblePeerIsRefusedBeforeAnyGet) {
  const auto layout = layout_of(kernels::KvDType::kF32, kernels::KvLayoutKind::kND, 4);
  Instance prefill(layout, 6, kTcp), decode(layout, 6, kTcp, /*fingerprint=*/8);  // another model
  ASSERT_NE(prefill.agent, nullptr);
  const int32_t remote[] = {1}, local[] = {1};
  const Lease lease = prefill.leases.grant(remote);
  const PullResult r = decode.agent->pull(request_for(prefill, lease, local));
  EXPECT_FALSE(r.status.is_ok());
  EXPECT_NE(r.status.message().find("another model"), std::string::npos) << r.status.message();
  EXPECT_EQ(r.num_gets, 0);
  EXPECT_EQ(prefill.leases.stats().confirmed, 0);
}

TEST(UcxAgent, OutOfRangeBlockIsRefused) {
  const auto layout = layout_of(kernels::KvDType::kF32, kernels::KvLayoutKind::kND, 4);
  Instance prefill(layout, 6, kTcp), decode(layout, 6, kTcp);
  ASSERT_NE(prefill.agent, nullptr);
  const int32_t remote[] = {1}, local[] = {1};
  const Lease lease = prefill.leases.grant(remote);
  PullRequest r = request_for(prefill, lease, local);
  r.blocks[0].remote.block = 6;  // past the peer's pool
  EXPECT_EQ(decode.agent->pull(r).status.code(), StatusCode::kInvalidArgument);
}

TEST(UcxAgent, UnreachablePeerFailsWithinTheTimeout) {
  const auto layout = layout_of(kernels::KvDType::kF32, kernels::KvLayoutKind::kND, 4);
  Instance decode(layout, 6, kTcp);
  ASSERT_NE(decode.agent, nullptr);
  int port = 0;
  {
    Instance gone(layout, 6, kTcp);  // a port that was just listened on, now closed
    port = gone.agent->port();
  }
  PullRequest r;
  r.host = "127.0.0.1";
  r.port = port;
  r.lease_id = 1;
  r.blocks.push_back({{1, 1}, 1});
  r.timeout_s = 2;
  EXPECT_FALSE(decode.agent->pull(r).status.is_ok());
}

TEST(TransferWire, DecodersRejectGarbage) {
  std::mt19937 rng(5);
  PoolDescriptor d;
  d.engine_id = "e";
  d.layout = layout_of(kernels::KvDType::kF16, kernels::KvLayoutKind::kND, 4);
  d.num_blocks = 3;
  d.k_block_bytes = d.v_block_bytes = 16;
  d.k_base = {1, 2, 3};
  d.v_base = {4, 5, 6};
  d.rkey = {9, 9};
  const std::vector<uint8_t> good = encode_descriptor(42, d);
  uint64_t id = 0;
  auto back = decode_descriptor(good, &id);
  ASSERT_TRUE(back.is_ok());
  EXPECT_EQ(id, 42u);
  EXPECT_EQ(back->v_base, d.v_base);
  for (size_t n = 0; n < good.size(); ++n) {  // every truncation is an error, never a crash
    EXPECT_FALSE(decode_descriptor(std::span(good).first(n), &id).is_ok()) << n;
  }
  for (int i = 0; i < 500; ++i) {
    std::vector<uint8_t> junk(rng() % 64);
    for (uint8_t& b : junk) b = static_cast<uint8_t>(rng());
    (void)decode_descriptor(junk, &id);
    (void)decode_confirm(junk);
    (void)decode_confirm_reply(junk);
  }
  ConfirmMessage m{7, 8, {{1, 2}, {3, 4}}};
  auto c = decode_confirm(encode_confirm(m));
  ASSERT_TRUE(c.is_ok());
  EXPECT_EQ(c->refs, m.refs);
  auto reply = decode_confirm_reply(encode_confirm_reply({9, Status::not_found("gone")}));
  ASSERT_TRUE(reply.is_ok());
  EXPECT_EQ(reply->status.code(), StatusCode::kNotFound);
}

}  // namespace
}  // namespace pagoda::transfer
