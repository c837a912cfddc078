// ThreadPool: a fixed set of threads running submitted tasks in FIFO order.
//
// Used by the Compiler to run NVRTC programs in parallel (NVRTC is thread-safe per program).
// submit() is thread-safe; the destructor finishes queued tasks and joins the threads.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <future>
#include <mutex>
#include <thread>
#include <vector>

namespace ktune {

class ThreadPool {
 public:
  // threads == 0: one per hardware thread.
  explicit ThreadPool(unsigned threads = 0) {
    if (threads == 0) threads = std::max(1u, std::thread::hardware_concurrency());
    for (unsigned i = 0; i < threads; ++i) m_threads.emplace_back([this] { run(); });
  }
  ~ThreadPool() {
    {
      std::lock_guard lock(m_mutex);
      m_stopping = true;
    }
    m_cv.notify_all();
    for (auto& t : m_threads) t.join();
  }
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  size_t size() const { return m_threads.size(); }

  template <typename F>
  auto submit(F&& fn) -> std::future<decltype(fn())> {
    using R = decltype(fn());
    auto task = std::make_shared<std::packaged_task<R()>>(std::forward<F>(fn));
    auto future = task->get_future();
    {
      std::lock_guard lock(m_mutex);
      m_queue.emplace_back([task] { (*task)(); });
    }
    m_cv.notify_one();
    return future;
  }

 private:
  void run() {
    while (true) {
      std::function<void()> job;
      {
        std::unique_lock lock(m_mutex);
        m_cv.wait(lock, [this] { return m_stopping || !m_queue.empty(); });
        if (m_queue.empty()) return;  // stopping and drained
        job = std::move(m_queue.front());
        m_queue.pop_front();
      }
      job();
    }
  }

  std::mutex m_mutex;
  std::condition_variable m_cv;
  std::deque<std::function<void()>> m_queue;
  bool m_stopping = false;
  std::vector<std::thread> m_threads;
};

}  // namespace ktune
