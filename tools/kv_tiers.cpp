// The tiers below the KV pool, from the flags (--kv-host-mem, --kv-disk-dir, --kv-disk-mem,
// --kv-offload, --kv-load, --kv-remote*): creates the host DRAM tier, the SSD tier and the remote
// tier on Redis (tools/kv_remote.cpp) and attaches them to the engine (fastest first), logging
// each tier's capacity in blocks and tokens. A directory that is missing, unwritable, full or in
// use is an error here, at start-up.
#include "kvcache/disk_tier.h"
#include "kvcache/host_tier.h"
#include "tools/commands.h"

namespace pagoda::tools {

void add_tier_options(CLI::App& app, EngineOptions& o) {
  app.add_option("--kv-host-mem", o.kv_host_mem,
                 "host DRAM tier below the KV pool: evicted blocks are kept here and loaded back on a prefix hit, "
                 "e.g. 4G (0: off)");
  app.add_option("--kv-disk-dir", o.kv_disk_dir,
                 "SSD tier below the host tier: a directory for KV block records (io_uring, O_DIRECT); kept across "
                 "restarts");
  app.add_option("--kv-disk-mem", o.kv_disk_mem, "space the SSD tier may take in --kv-disk-dir, e.g. 20G");
  app.add_option("--kv-offload", o.kv_offload,
                 "write-back: a block goes down when the pool evicts it; write-through: every computed block at once")
      ->check(CLI::IsMember({"write-back", "write-through"}));
  app.add_option("--kv-load", o.kv_load,
                 "auto: load a prefix from a tier when the cost model says it beats recomputing; load: always; "
                 "recompute: never")
      ->check(CLI::IsMember({"auto", "load", "recompute"}));
  // Swap preemption (the serving loop's; `run` serves one request at a time and never preempts).
  app.add_option("--preemption", o.preemption,
                 "a request preempted for lack of KV blocks: recompute its KV later, or swap its blocks into the host "
                 "tier (--kv-host-mem) and load them back")
      ->check(CLI::IsMember({"recompute", "swap"}));
  add_kv_remote_options(app, o.kv_remote);  // --kv-remote* (tools/kv_remote.cpp)
}

Status attach_kv_tiers(const EngineOptions& o, engine::Engine& eng, const Clock& clock, const Logger& logger) {
  int64_t host_bytes = 0, disk_bytes = 0;
  if (!o.kv_host_mem.empty()) {
    PAGODA_ASSIGN_OR_RETURN(host_bytes, kvcache::parse_bytes(o.kv_host_mem));
  }
  if (!o.kv_disk_mem.empty()) {
    PAGODA_ASSIGN_OR_RETURN(disk_bytes, kvcache::parse_bytes(o.kv_disk_mem));
  }
  if (host_bytes < 0) return Status::invalid_argument("--kv-host-mem must be >= 0");
  if (!o.kv_disk_dir.empty() && disk_bytes <= 0) {
    return Status::invalid_argument("--kv-disk-dir needs --kv-disk-mem (the space the SSD tier may take), e.g. 20G");
  }
  if (o.kv_disk_dir.empty() && disk_bytes > 0) return Status::invalid_argument("--kv-disk-mem needs --kv-disk-dir");
  const bool remote = !o.kv_remote.urls.empty();  // --kv-remote (tools/kv_remote.cpp)
  if (host_bytes == 0 && o.kv_disk_dir.empty() && !remote) return Status::ok();
  if (o.no_prefix_cache) {
    return Status::invalid_argument("KV tiers (--kv-host-mem, --kv-disk-dir, --kv-remote) need the prefix cache");
  }
  const kvcache::KvLayout& layout = eng.kv_layout();
  std::vector<std::unique_ptr<kvcache::Tier>> tiers;
  std::vector<bool> write_through;
  if (host_bytes > 0) {
    kvcache::HostTierOptions ho;
    ho.capacity_bytes = host_bytes;
    ho.layout = layout;
    ho.prefault = true;
    PAGODA_ASSIGN_OR_RETURN(std::unique_ptr<kvcache::HostTier> host, kvcache::HostTier::create(ho, clock));
    logger.info(host->describe());
    tiers.push_back(std::move(host));
    write_through.push_back(false);
  }
  if (!o.kv_disk_dir.empty()) {
    kvcache::DiskTierOptions d;
    d.dir = o.kv_disk_dir;
    d.capacity_bytes = disk_bytes;
    d.layout = layout;
    d.model_fingerprint = eng.model_fingerprint();
    d.kv_format = eng.kv_format_key();
    d.eviction = kvcache::EvictionPolicyKind::kPriority;
    // Write-through puts every committed block: stage three full prefill steps' worth, so that
    // writes completing a step late do not leave a step's blocks to the retry path.
    d.min_write_blocks = 3 * ((eng.config().max_batch_tokens + layout.block_size - 1) / layout.block_size);
    Result<std::unique_ptr<kvcache::DiskTier>> disk = kvcache::DiskTier::create(d, clock, logger);
    if (!disk.is_ok()) return disk.status().with_context("--kv-disk-dir " + o.kv_disk_dir);
    logger.info(disk.value()->describe());
    tiers.push_back(std::move(disk).value());
    write_through.push_back(true);  // persistent: what was computed survives a SIGKILL
  }
  // ---- remote tier (--kv-remote, tools/kv_remote.cpp): last, below host and disk ----
  if (remote) {
    PAGODA_ASSIGN_OR_RETURN(std::unique_ptr<kvcache::Tier> redis, make_kv_remote_tier(o.kv_remote, eng, clock, logger));
    tiers.push_back(std::move(redis));
    write_through.push_back(true);  // shared: another instance finds a prefix once it is computed
  }
  // ---- end remote tier ----
  const auto offload = kvcache::offload_mode_from_name(o.kv_offload);
  if (!offload) return Status::invalid_argument("unknown --kv-offload '" + o.kv_offload + "'");
  engine::LoadCostModel::Mode mode = engine::LoadCostModel::Mode::kAuto;
  if (o.kv_load == "load") mode = engine::LoadCostModel::Mode::kAlwaysLoad;
  if (o.kv_load == "recompute") mode = engine::LoadCostModel::Mode::kNeverLoad;
  PAGODA_RETURN_IF_ERROR(eng.attach_tiers(std::move(tiers), *offload, mode, write_through));
  if (mode == engine::LoadCostModel::Mode::kAuto) {  // the first load decision on this machine's numbers
    if (Result<double> tps = eng.calibrate_load_cost(); !tps.is_ok()) {
      logger.warn("kv load cost: no start-up prefill timing (" + tps.status().message() + "); a prior is used until requests measure it");
    }
  }
  logger.info("KV tiers: offload " + o.kv_offload + ", load " + o.kv_load);
  return Status::ok();
}

}  // namespace pagoda::tools
