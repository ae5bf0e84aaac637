// KV transfer bandwidth: two UcxAgents (transfer/ucx_agent.h) in one process, a decode side
// pulling blocks from a prefill side's registered pool as the P/D path does (one get per run of
// consecutive blocks per layer and K/V, then the confirm round trip), over each transport.
// Prints one markdown table: GB/s of whole pulls (handshake excluded, confirm included) next to
// the message size, for comparison with `ucx_perftest -t ucp_get` on the same UCX_TLS.
//
//   build/bin/kv_transfer_bench [--blocks 64] [--block-kib 1024] [--iters 20] [--tls tcp,self|sm,self]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "transfer/ucx_agent.h"

using namespace pagoda;

namespace {

struct Side {
  Side(const kvcache::KvLayout& layout, int64_t num_blocks, const std::string& tls, transfer::LeaseTable* leases)
      : pool(kvcache::BlockPool::create(layout, num_blocks).value()) {
    transfer::UcxAgentConfig c;
    c.ucx_options = {{"TLS", tls}};
    c.ucx_options.emplace_back("NET_DEVICES", "lo");
    auto created = transfer::UcxAgent::create(c, transfer::describe_pool(pool, "bench", 1, 1), leases, clock, logger);
    if (!created.is_ok()) {
      std::fprintf(stderr, "%s\n", created.status().message().c_str());
      std::exit(1);
    }
    agent = std::move(created).value();
  }
  SteadyClock clock;
  Logger logger{LogLevel::kWarn};
  kvcache::BlockPool pool;
  std::unique_ptr<transfer::UcxAgent> agent;
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  int64_t blocks = 64, block_kib = 1024, iters = 20;
  std::vector<std::string> transports = {"tcp,self", "sm,self,tcp"};
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--blocks") blocks = std::atoll(argv[i + 1]);
    else if (a == "--block-kib") block_kib = std::atoll(argv[i + 1]);
    else if (a == "--iters") iters = std::atoll(argv[i + 1]);
    else if (a == "--tls") transports = {argv[i + 1]};
  }
  // One layer, f32: a block of block_kib KiB is one K and one V segment of half that each.
  kvcache::KvLayout layout;
  layout.n_layer = 1;
  layout.n_kv_head = 1;
  layout.block_size = 16;
  layout.head_dim = block_kib * 1024 / 2 / 4 / layout.block_size;
  std::printf("| UCX_TLS | block (K+V) | blocks per pull | gets per pull | pull GB/s (median of %lld) | run as |\n",
              static_cast<long long>(iters));
  std::printf("|---|---|---|---|---|---|\n");
  for (const std::string& tls : transports) {
    SteadyClock clock;
    transfer::LeaseTable leases(blocks, clock, int64_t{60} * 1'000'000'000);
    Side prefill(layout, blocks, tls, &leases), decode(layout, blocks, tls, nullptr);
    for (int pass = 0; pass < 2; ++pass) {  // scattered blocks (one get each), then one run
      std::vector<double> gbps;
      int64_t gets = 0;
      for (int64_t it = 0; it < iters + 1; ++it) {
        std::vector<int32_t> ids(blocks);
        for (int64_t b = 0; b < blocks; ++b) ids[b] = static_cast<int32_t>(pass == 0 ? (b * 7) % blocks : b);
        const transfer::Lease lease = leases.grant(ids);
        transfer::PullRequest r;
        r.host = prefill.agent->host();
        r.port = prefill.agent->port();
        r.lease_id = lease.id;
        r.timeout_s = 60;
        for (int64_t b = 0; b < blocks; ++b) r.blocks.push_back({lease.blocks[b], static_cast<int32_t>(b)});
        const transfer::PullResult res = decode.agent->pull(r);
        leases.take_ended();
        if (!res.status.is_ok()) {
          std::fprintf(stderr, "%s: %s\n", tls.c_str(), res.status.message().c_str());
          return 1;
        }
        if (it == 0) continue;  // the first pull pays the handshake
        gets = res.num_gets;
        gbps.push_back(static_cast<double>(res.bytes) / res.seconds * 1e-9);
      }
      std::printf("| %s | %lld KiB | %lld | %lld (%s) | %.2f | kv_transfer_bench --tls %s |\n", tls.c_str(),
                  static_cast<long long>(block_kib), static_cast<long long>(blocks), static_cast<long long>(gets),
                  pass == 0 ? "scattered" : "one run", median(gbps), tls.c_str());
    }
  }
  return 0;
}
