// Where tests find shared data: $PAGODA_TEST_DATA, else ../shared beside the checkout.
// A missing file is a test failure (never a skip): CI must have the data.
#pragma once

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

namespace pagoda::testing {

inline std::string test_data_dir() {
  const char* env = std::getenv("PAGODA_TEST_DATA");
  return env != nullptr && *env != '\0' ? std::string(env) : std::string(PAGODA_DEFAULT_TEST_DATA);
}

inline std::string stories_dir() { return test_data_dir() + "/models/stories260K"; }

inline std::string read_file_or_empty(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

inline bool file_exists(const std::string& path) { return std::ifstream(path).good(); }

}  // namespace pagoda::testing
