// Runs a dashboard check in headless Chromium (tests/npm/dashboard/*.mjs, puppeteer-core from
// `npm ci` of its lock file, Debian's /usr/bin/chromium): the serve dashboard's test and the
// router dashboard's test. One Chromium at a time, across test binaries (ctest runs them side by
// side otherwise): two browsers and two loaded servers on two cores starve each other's renders
// (7 s alone, ~2 min together).
#pragma once

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include "core/check.h"
#include "shell.h"

namespace pagoda::testing {

inline std::string dashboard_npm_dir() { return std::string(PAGODA_SOURCE_DIR) + "/tests/npm/dashboard"; }

// "" when puppeteer-core and chromium are installed, else what is missing and how to get it.
inline std::string browser_missing() {
  if (!std::filesystem::exists(dashboard_npm_dir() + "/node_modules/puppeteer-core/package.json")) {
    return "puppeteer-core is missing: run `npm ci` in " + dashboard_npm_dir() + " (scripts/install_deps.sh does)";
  }
  if (!std::filesystem::exists("/usr/bin/chromium")) return "Debian's chromium is missing (scripts/install_deps.sh)";
  return "";
}

// node tests/npm/dashboard/SCRIPT ARGS (stdout and stderr), under the one-browser lock.
inline ShellRun run_browser_script(const std::string& script, const std::string& args) {
  const int lock = open("/tmp/pagoda-dashboard-browser.lock", O_RDWR | O_CREAT, 0666);
  CHECK(lock >= 0 && flock(lock, LOCK_EX) == 0);
  ShellRun run = run_shell("cd " + dashboard_npm_dir() + " && node " + script + " " + args + " 2>&1");
  flock(lock, LOCK_UN);
  close(lock);
  return run;
}

}  // namespace pagoda::testing
