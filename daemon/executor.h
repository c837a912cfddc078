// Executor: the threads that run everything an I/O thread must not — cold lookups, imports,
// exports, status, job control.
//
// Its threads run at a lower CPU priority (nice +10 over the daemon's, SCHED_BATCH): on a node
// whose cores are all busy, a cached lookup on an I/O thread is scheduled before a long import or
// export, which is what "a cached answer is never queued behind them" needs on a machine with few
// cores. Lanes (strands) keep one client's work in order, one item at a time. post() is
// thread-safe; stop() lets queued work finish, then ends the threads.
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/strand.hpp>
#include <functional>
#include <thread>
#include <vector>

namespace ktune {

class Executor {
 public:
  // `threads` >= 1; `nice` is added to each thread's nice value (0 = same as the daemon).
  Executor(int threads, int nice);
  ~Executor();
  Executor(const Executor&) = delete;
  Executor& operator=(const Executor&) = delete;

  void post(std::function<void()> work) { boost::asio::post(m_io, std::move(work)); }

  // One client's queue on the executor (an asio strand): work posted to a lane runs one item at
  // a time, in order, on any executor thread, so one client holds at most one thread through it.
  // A lane stays valid as long as a copy of it lives, after the executor's stop() included.
  using Lane = boost::asio::strand<boost::asio::io_context::executor_type>;
  Lane make_lane() { return boost::asio::make_strand(m_io); }
  static void post(const Lane& lane, std::function<void()> work) {
    boost::asio::post(lane, std::move(work));
  }
  // Finishes what is queued, then joins the threads. Idempotent.
  void stop();

 private:
  boost::asio::io_context m_io;
  boost::asio::executor_work_guard<boost::asio::io_context::executor_type> m_guard;
  std::vector<std::thread> m_threads;
};

}  // namespace ktune
