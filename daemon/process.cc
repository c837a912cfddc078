#include "daemon/process.h"

#include <sys/resource.h>

#include <chrono>
#include <cstdlib>
#include <ctime>
#include <filesystem>
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

// Taken while static objects are constructed: before main, so the process's start.
const std::int64_t k_start_time_s = std::int64_t(std::time(nullptr));

}  // namespace

ProcessStats process_stats() {
  ProcessStats p;
  p.resident_bytes = resident_mib() * 1024.0 * 1024.0;
  rusage use{};
  if (::getrusage(RUSAGE_SELF, &use) == 0)
    p.cpu_seconds = double(use.ru_utime.tv_sec + use.ru_stime.tv_sec) +
                    double(use.ru_utime.tv_usec + use.ru_stime.tv_usec) / 1e6;
  std::error_code ec;
  for (std::filesystem::directory_iterator it("/proc/self/fd", ec), end; !ec && it != end;
       it.increment(ec))
    ++p.open_fds;
  if (p.open_fds > 0) --p.open_fds;  // the listing's own descriptor
  p.start_time_s = k_start_time_s;
  return p;
}

double resident_mib() {
  std::ifstream in("/proc/self/status");
  for (std::string line; std::getline(in, line);)
    if (line.starts_with("VmRSS:")) return std::strtod(line.c_str() + 6, nullptr) / 1024.0;
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
