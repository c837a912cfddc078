// Session: one client connection, from first byte to close.
//
// A coroutine reads newline-delimited requests into a buffer capped at the 64 KiB frame limit,
// answers every complete line in order (pipelined requests are answered in one write), and ends
// on EOF, an I/O error, an oversized frame (error reply, then close) or the read deadline (error
// reply, then close). A watchdog coroutine on the same strand enforces the deadline. No exception
// leaves a session.
#pragma once

#include <boost/asio.hpp>
#include <chrono>
#include <memory>
#include <string>

#include "daemon/dispatcher.h"
#include "daemon/metrics.h"

namespace ktune {

class SessionBase {
 public:
  virtual ~SessionBase() = default;
  // Closes the connection from any thread.
  virtual void close() = 0;
};

template <typename Socket>
class Session final : public SessionBase, public std::enable_shared_from_this<Session<Socket>> {
 public:
  Session(Socket socket, Dispatcher& dispatcher, Metrics& metrics, Peer peer,
          std::chrono::milliseconds read_timeout);
  ~Session() override;

  // Spawns the reader and the watchdog on the socket's strand.
  void start();
  void close() override;

 private:
  boost::asio::awaitable<void> read_loop();
  boost::asio::awaitable<void> watchdog();

  Socket m_socket;
  Dispatcher& m_dispatcher;
  Metrics& m_metrics;
  Peer m_peer;
  std::chrono::milliseconds m_read_timeout;
  boost::asio::steady_timer m_timer;
  std::chrono::steady_clock::time_point m_last_activity;
  bool m_timed_out = false;
  bool m_done = false;
};

}  // namespace ktune
