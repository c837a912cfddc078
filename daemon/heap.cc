#include "daemon/heap.h"

#include <chrono>
#include <fstream>
#include <string>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include "config/log.h"

namespace ktune {
namespace {

// ASan and the other sanitizers with their own allocator leave glibc's arenas unused.
constexpr bool k_glibc_heap =
#if defined(__GLIBC__) && !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
    true;
#else
    false;
#endif

}  // namespace

double resident_mib() {
  std::ifstream in("/proc/self/status");
  for (std::string line; std::getline(in, line);)
    if (line.starts_with("VmRSS:")) return std::stod(line.substr(6)) / 1024.0;
  return 0;
}

HeapTrim trim_heap(const char* after) {
  HeapTrim t;
  t.rss_before_mib = resident_mib();
  const auto t0 = std::chrono::steady_clock::now();
#if defined(__GLIBC__)
  if (k_glibc_heap) {
    ::malloc_trim(0);
    t.trimmed = true;
  }
#endif
  t.ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  t.rss_after_mib = resident_mib();
  log(LogLevel::info, "heap_trimmed",
      {{"after", after},
       {"rss_before_mib", t.rss_before_mib},
       {"rss_after_mib", t.rss_after_mib},
       {"ms", t.ms},
       {"trimmed", t.trimmed ? "yes" : "no"}});
  return t;
}

}  // namespace ktune
