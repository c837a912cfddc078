// This process's resources as the metrics export them (resident memory, CPU time, open files,
// start time), and handing freed heap back to the kernel after work that freed a lot of it.
//
// glibc keeps what a process frees for its next allocations; only the top of the heap goes back
// by itself. An import of a large table (a 60 MB document parsed into records on an executor
// thread) leaves ~90 MB of such free memory behind in a daemon that will not allocate it again
// (bench/NOTES.md, "Where a daemon's memory goes after importing a table"). trim_heap returns
// those pages. It walks every malloc arena (milliseconds on a heap of hundreds of MB), so it runs
// off the I/O threads. Thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>

namespace ktune {

// An import whose table came as an attachment of at least this many bytes is followed by a trim
// once its handler has replied and the request is released.
inline constexpr size_t k_trim_after_attachment_bytes = size_t(1) << 20;

struct HeapTrim {
  double rss_before_mib = 0;  // VmRSS before and after (0 where /proc is unreadable)
  double rss_after_mib = 0;
  double ms = 0;         // time the trim took
  bool trimmed = false;  // false where the heap is not glibc's (another libc, ASan or TSan)
};

// Trims the heap and logs "heap_trimmed" (info) with `after` (what freed the memory), the RSS
// before and after, and the time taken.
HeapTrim trim_heap(const char* after);

// This process's resident set size in MiB (VmRSS), 0 when it cannot be read. Never throws.
double resident_mib();

// What the process_* metrics (the names Prometheus client libraries use) report.
struct ProcessStats {
  double resident_bytes = 0;      // VmRSS
  double cpu_seconds = 0;         // user + system, all threads
  std::size_t open_fds = 0;       // file descriptors open
  std::int64_t start_time_s = 0;  // unix seconds the process started
};
ProcessStats process_stats();

}  // namespace ktune
