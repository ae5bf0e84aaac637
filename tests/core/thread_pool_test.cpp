#include "core/thread_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <vector>

namespace pagoda {
namespace {

TEST(ThreadPool, CoversEveryIndexOnceAcrossManyJobs) {
  for (int threads : {1, 2, 3, 5}) {
    ThreadPool pool(threads);
    for (int64_t n : {0, 1, 2, 7, 64, 1001}) {
      for (int64_t grain : {1, 4, 32}) {
        std::vector<std::atomic<int>> hits(n);
        pool.parallel_for(n, [&](int64_t b, int64_t e, int t) {
          EXPECT_LT(t, threads);
          if (e != n) EXPECT_EQ((e - b) % grain, 0);
          for (int64_t i = b; i < e; ++i) hits[i].fetch_add(1);
        }, grain);
        for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[i].load(), 1) << threads << " " << n << " " << i;
      }
    }
  }
}

}  // namespace
}  // namespace pagoda
