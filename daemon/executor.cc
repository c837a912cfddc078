#include "daemon/executor.h"

#include <pthread.h>
#include <sched.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace ktune {

Executor::Executor(int threads, int nice) : m_guard(boost::asio::make_work_guard(*m_io)) {
  for (int i = 0; i < threads; ++i)
    m_threads.emplace_back([this, nice] {
      if (nice > 0) {
        // SCHED_BATCH: the scheduler treats these threads as CPU-bound and does not let their
        // wakeups preempt the I/O threads (bench/NOTES.md § Cold lookups under traffic).
        const sched_param none{};
        (void)::pthread_setschedparam(::pthread_self(), SCHED_BATCH, &none);  // best effort
      }
      if (nice != 0) {
        // Linux: a nice value is per thread (setpriority on the thread id).
        const auto tid = static_cast<id_t>(::syscall(SYS_gettid));
        const int base = ::getpriority(PRIO_PROCESS, tid);
        (void)::setpriority(PRIO_PROCESS, tid, base + nice);  // best effort
      }
      // No sched_yield() between items: it shortened the cached tail under a cold flood on an
      // otherwise idle node, but starved cold builds behind any other runnable work (even nice
      // 19 batch jobs): bench/NOTES.md § The cached tail under a cold flood.
      m_io->run();
    });
}

Executor::~Executor() {
  stop();
}

void Executor::stop() {
  m_guard.reset();
  for (auto& t : m_threads)
    if (t.joinable()) t.join();
}

}  // namespace ktune
