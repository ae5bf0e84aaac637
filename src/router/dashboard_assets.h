// The router dashboard's files (src/router/dashboard/* and the serve dashboard's stylesheet),
// compiled into the binary at build time (src/router/CMakeLists.txt): no CDN, no files read at
// run time.
#pragma once

#include <span>
#include <string_view>

namespace pagoda::router {

struct DashboardAsset {
  std::string_view path;          // "/dashboard", "/dashboard/router.js", ...
  std::string_view content_type;
  std::string_view body;
};

std::span<const DashboardAsset> dashboard_assets();

}  // namespace pagoda::router
