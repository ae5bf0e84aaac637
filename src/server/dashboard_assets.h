// The dashboard's files (src/server/dashboard/*), compiled into the binary at build time by
// src/server/dashboard/embed.cmake: no CDN, no files read at run time.
#pragma once

#include <span>
#include <string_view>

namespace pagoda::server {

struct DashboardAsset {
  std::string_view path;          // "/dashboard", "/dashboard/dashboard.js", ...
  std::string_view content_type;
  std::string_view body;
};

std::span<const DashboardAsset> dashboard_assets();

}  // namespace pagoda::server
