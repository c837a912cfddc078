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
#include <memory>
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

  void post(std::function<void()> work) { boost::asio::post(*m_io, std::move(work)); }

  // One client's queue on the executor (an asio strand): work posted to a lane runs one item at
  // a time, in order, on any executor thread, so one client holds at most one thread through it.
  // A lane keeps the executor's io_context alive (a strand's state lives in a service of that
  // io_context), so a session may outlive the executor; work posted after stop() never runs.
  class Lane {
   public:
    explicit Lane(std::shared_ptr<boost::asio::io_context> io)
        : m_io(std::move(io)), m_strand(boost::asio::make_strand(*m_io)) {}

   private:
    friend class Executor;
    std::shared_ptr<boost::asio::io_context> m_io;  // declared first: destroyed after the strand
    boost::asio::strand<boost::asio::io_context::executor_type> m_strand;
  };
  Lane make_lane() { return Lane(m_io); }
  static void post(const Lane& lane, std::function<void()> work) {
    boost::asio::post(lane.m_strand, std::move(work));
  }
  // Finishes what is queued, then joins the threads. Idempotent.
  void stop();

 private:
  std::shared_ptr<boost::asio::io_context> m_io = std::make_shared<boost::asio::io_context>();
  boost::asio::executor_work_guard<boost::asio::io_context::executor_type> m_guard;
  std::vector<std::thread> m_threads;
};

}  // namespace ktune
