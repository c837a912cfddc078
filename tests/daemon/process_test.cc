#include "daemon/process.h"

#include <gtest/gtest.h>

#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <vector>

namespace ktune {
namespace {

// 64 MB freed below a block still in use (so the heap's top cannot shrink by itself) stays
// resident until trim_heap hands it back, as an import's parsed document does in ktuned.
TEST(HeapTest, TrimHandsFreedHeapBelowALiveBlockBackToTheKernel) {
#if !defined(__GLIBC__) || defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  GTEST_SKIP() << "the heap is not glibc's here: nothing to trim";
#endif
  constexpr size_t k_block = 1024, k_blocks = 64 * 1024;
  std::vector<void*> blocks(k_blocks);
  for (auto& b : blocks) {
    b = std::malloc(k_block);
    ASSERT_NE(b, nullptr);
    std::memset(b, 0x5a, k_block);
  }
  void* live = std::malloc(k_block);  // above them
  ASSERT_NE(live, nullptr);
  std::memset(live, 1, k_block);
  for (void* b : blocks) std::free(b);
  const double resident = resident_mib();
  ASSERT_GT(resident, 64.0) << "the freed blocks are still resident before the trim";

  const HeapTrim t = trim_heap("test");
  EXPECT_TRUE(t.trimmed);
  EXPECT_GE(t.rss_before_mib, 64.0);
  EXPECT_LT(t.rss_after_mib, t.rss_before_mib - 48.0)
      << "before " << t.rss_before_mib << " MiB, after " << t.rss_after_mib << " MiB";
  EXPECT_GT(t.ms, 0.0) << "the trim's own time is measured";
  EXPECT_LT(t.ms, 5000.0);
  std::free(live);
}

// The process_* metrics move with what the process does.
TEST(ProcessStatsTest, FollowMemoryCpuAndFiles) {
  const ProcessStats at_start = process_stats();
  EXPECT_GT(at_start.resident_bytes, 0);
  EXPECT_GT(at_start.open_fds, 2u) << "stdin, stdout and stderr at least";
  const auto now = std::int64_t(std::time(nullptr));
  EXPECT_LE(at_start.start_time_s, now);
  EXPECT_GT(at_start.start_time_s, now - 3600) << "this test process started minutes ago at most";

  std::vector<char> touched(64 << 20, 1);  // 64 MiB, every page written
  const int fd = ::open("/proc/self/status", O_RDONLY);
  ASSERT_GE(fd, 0);
  volatile double x = 1;
  const auto t0 = std::chrono::steady_clock::now();
  while (std::chrono::steady_clock::now() - t0 < std::chrono::milliseconds(200)) x = x * 1.0000001;
  const ProcessStats later = process_stats();
  ::close(fd);
  EXPECT_GT(later.resident_bytes, at_start.resident_bytes + 48.0 * 1024 * 1024)
      << touched[touched.size() / 2];
  EXPECT_GT(later.cpu_seconds, at_start.cpu_seconds + 0.1);
  EXPECT_EQ(later.open_fds, at_start.open_fds + 1);
  EXPECT_EQ(later.start_time_s, at_start.start_time_s);
}

}  // namespace
}  // namespace ktune
