#include "daemon/heap.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
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
  EXPECT_GE(t.ms, 0.0);
  std::free(live);
}

}  // namespace
}  // namespace ktune
