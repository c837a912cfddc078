// Waiting in tests for state another process or thread reaches on its own time (a fleet peer
// reading Redis, a daemon's background job), where there is no event to wait on.
#pragma once

#include <chrono>
#include <thread>

namespace ktune::testing {

// Polls `pred` every `poll` until it holds or `timeout` passes; returns whether it held (checked
// once more at the deadline).
template <typename Pred>
bool eventually(Pred pred, std::chrono::milliseconds timeout = std::chrono::seconds(10),
                std::chrono::milliseconds poll = std::chrono::milliseconds(10)) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (pred()) return true;
    std::this_thread::sleep_for(poll);
  }
  return pred();
}

}  // namespace ktune::testing
