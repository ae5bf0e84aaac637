#include "store/redis_url.h"

#include <charconv>

namespace pagoda::store {
namespace {

Result<int> parse_int(std::string_view text, int lo, int hi, std::string_view what, std::string_view url) {
  int value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size() || value < lo || value > hi) {
    return Status::invalid_argument("--kv-remote " + std::string(url) + ": " + std::string(what) + " '" +
                                    std::string(text) + "' is not a number in [" + std::to_string(lo) + ", " +
                                    std::to_string(hi) + "]");
  }
  return value;
}

}  // namespace

Result<RedisEndpoint> parse_redis_url(std::string_view url, bool* is_cluster) {
  const auto bad = [&](const std::string& why) {
    return Status::invalid_argument("--kv-remote " + std::string(url) + ": " + why +
                                    " (expected redis://HOST:PORT or redis+cluster://HOST:PORT)");
  };
  std::string_view rest;
  if (url.starts_with("redis://")) {
    *is_cluster = false;
    rest = url.substr(8);
  } else if (url.starts_with("redis+cluster://")) {
    *is_cluster = true;
    rest = url.substr(16);
  } else {
    return bad("unknown scheme");
  }
  RedisEndpoint ep;
  if (const size_t at = rest.rfind('@'); at != std::string_view::npos) {
    std::string_view userinfo = rest.substr(0, at);
    rest = rest.substr(at + 1);
    const size_t colon = userinfo.find(':');
    if (colon == std::string_view::npos || colon != 0) return bad("credentials must be ':PASSWORD@' (no user name)");
    ep.password = std::string(userinfo.substr(1));
    if (ep.password.empty()) return bad("empty password");
  }
  std::string_view path;
  if (const size_t slash = rest.find('/'); slash != std::string_view::npos) {
    path = rest.substr(slash + 1);
    rest = rest.substr(0, slash);
  }
  std::string_view port_text;
  bool has_port = false;
  if (rest.starts_with("[")) {
    const size_t close = rest.find(']');
    if (close == std::string_view::npos) return bad("unclosed '[' in the host");
    ep.host = std::string(rest.substr(1, close - 1));
    std::string_view after = rest.substr(close + 1);
    if (!after.empty()) {
      if (!after.starts_with(":")) return bad("junk after ']'");
      port_text = after.substr(1);
      has_port = true;
    }
  } else {
    const size_t colon = rest.rfind(':');
    ep.host = std::string(rest.substr(0, colon));
    if (colon != std::string_view::npos) {
      port_text = rest.substr(colon + 1);
      has_port = true;
    }
    if (ep.host.find(':') != std::string::npos) return bad("an IPv6 host goes in brackets: [::1]:6379");
  }
  if (ep.host.empty()) return bad("no host");
  if (has_port) {
    PAGODA_ASSIGN_OR_RETURN(ep.port, parse_int(port_text, 1, 65535, "port", url));
  }
  if (!path.empty()) {
    if (*is_cluster) return bad("a Redis Cluster has no database number");
    PAGODA_ASSIGN_OR_RETURN(ep.db, parse_int(path, 0, 1 << 20, "database", url));
  }
  return ep;
}

Result<RedisTopology> parse_redis_urls(const std::vector<std::string>& urls) {
  if (urls.empty()) return Status::invalid_argument("--kv-remote: no Redis URL");
  RedisTopology topology;
  for (size_t i = 0; i < urls.size(); ++i) {
    bool cluster = false;
    PAGODA_ASSIGN_OR_RETURN(RedisEndpoint ep, parse_redis_url(urls[i], &cluster));
    if (i == 0) {
      topology.cluster = cluster;
    } else if (cluster != topology.cluster) {
      return Status::invalid_argument("--kv-remote: mixes redis:// servers with redis+cluster:// seeds (" + urls[0] +
                                      ", " + urls[i] + "); use one form");
    }
    for (const RedisEndpoint& seen : topology.endpoints) {
      if (seen.host == ep.host && seen.port == ep.port) {
        return Status::invalid_argument("--kv-remote: " + ep.address() + " is given twice");
      }
    }
    topology.endpoints.push_back(std::move(ep));
  }
  return topology;
}

Result<RedisCompression> parse_redis_compression(std::string_view name) {
  if (name == "none") return RedisCompression::kNone;
  if (name == "lz4") return RedisCompression::kLz4;
  if (name == "zstd") return RedisCompression::kZstd;
  return Status::invalid_argument("--kv-remote-compress '" + std::string(name) + "': expected none, lz4 or zstd");
}

std::string_view redis_compression_name(RedisCompression compression) {
  switch (compression) {
    case RedisCompression::kNone: return "none";
    case RedisCompression::kLz4: return "lz4";
    case RedisCompression::kZstd: return "zstd";
  }
  return "?";
}

}  // namespace pagoda::store
