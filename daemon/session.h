// Session: one client connection, from first byte to close.
//
// The reader coroutine takes newline-delimited requests from a buffer capped at the 64 KiB frame
// limit (plus the raw attachment a line may announce with "attach") and hands each to the
// Dispatcher. Replies keep request order: each request gets a slot,
// answered at once (a cached lookup) or later from the executor (everything else; a watch gets
// several lines), and the writer coroutine sends slots front to back as they complete. At most
// k_max_in_flight requests per connection are outstanding: past that the reader stops reading
// (a client that pipelines without reading is paused by TCP backpressure). An oversized frame or
// the read deadline (counted only while no request is outstanding) ends the connection after the
// replies before it and an error line. A line that looks like HTTP (a browser or curl on the
// protocol port) is answered with a 400 and the connection closed. Everything runs on the session's io_context thread; the
// executor posts its replies there. No exception leaves a session.
#pragma once

#include <atomic>
#include <boost/asio.hpp>
#include <chrono>
#include <deque>
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
  static constexpr size_t k_max_in_flight = 256;

  Session(Socket socket, Dispatcher& dispatcher, Metrics& metrics, Peer peer,
          std::chrono::milliseconds read_timeout);
  ~Session() override;

  // Spawns the reader, the writer and the watchdog on the socket's executor.
  void start();
  void close() override;

 private:
  struct Slot {
    std::string out;     // reply text not yet handed to the writer
    bool done = false;   // the last line arrived
    bool close = false;  // close the connection once this slot is written
  };

  boost::asio::awaitable<void> read_loop();
  boost::asio::awaitable<void> write_loop();
  boost::asio::awaitable<void> watchdog();
  // Queues a complete reply (error lines, fast answers) behind the outstanding ones.
  void push_ready(std::string line, bool close);
  // Runs one request line (and its attachment, if it announced one) through the dispatcher.
  void dispatch(std::string_view line, std::string attachment);
  void wake_writer() { m_write_signal.cancel(); }
  void finish();

  Socket m_socket;
  Dispatcher& m_dispatcher;
  Metrics& m_metrics;
  Peer m_peer;
  std::chrono::milliseconds m_read_timeout;
  boost::asio::steady_timer m_timer;         // watchdog
  boost::asio::steady_timer m_write_signal;  // wakes the writer
  boost::asio::steady_timer m_read_signal;   // wakes the reader when slots drain
  std::deque<std::shared_ptr<Slot>> m_slots;
  std::chrono::steady_clock::time_point m_last_activity;
  bool m_timed_out = false;
  bool m_reading_done = false;
  std::atomic<bool> m_done{false};  // also read by reply callbacks on executor threads
};

}  // namespace ktune
