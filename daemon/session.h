// Session: one client connection, from first byte to close.
//
// The reader coroutine takes newline-delimited requests from a buffer capped at the 64 KiB frame
// limit (plus the raw attachment a line may announce with "attach") and hands each to its
// RequestHandler (the Dispatcher; a scripted one in the frame fuzzer). Replies keep request
// order: each request gets a slot, answered at once (a cached lookup) or later from the executor
// (everything else; a watch gets several lines), and the writer coroutine sends slots front to
// back as they complete.
// Bounds per connection, so that one client can neither grow the daemon nor starve the others:
// the reader takes no further request while k_max_in_flight requests are outstanding, while
// k_max_running of them are still being answered (on the executor: a client pipelining
// thousands of exports holds at most that many executor slots, so another client's status is
// not queued behind them), or while more than max_output_bytes of replies wait to be sent
// (a client that does not read is paused: TCP backpressure stops it). If the client then
// accepts no byte for write_stall_timeout, the connection is dropped (counted in metrics).
// A line that looks like HTTP (a browser or curl on the protocol port) is answered with a 400
// and the connection closed. An oversized frame or the read deadline (counted only while no
// request is outstanding) ends the connection after the replies before it and an error line.
// Fairness on the I/O thread: once the lines of one read have taken more than turn_budget
// (lookups of never-seen shapes cheap enough to build there: daemon/lookups.h), the session
// yields to the other handlers queued on its thread before it takes the next line, so one client
// flooding cold lookups delays another's cached lookup by about one budget.
// Replies answered while the reader takes the lines of one read (cached lookups) are sent by the
// reader itself once those lines are done, with one non-blocking send (what the socket does not
// take goes to the writer, ahead of everything else), so a cached lookup costs no writer wake-up;
// replies that arrive later (from the executor) wake the writer. After a read whose replies went
// out, the reader lets the other handlers queued on its thread run before it reads again: a client
// that waits for its replies has usually sent its next request by then, so the read finds it
// rather than failing with EAGAIN (Asio tries a read before it asks epoll).
// When the daemon stops, drain() ends the reading (requests read but not run get one
// `unavailable` line) and the session closes once the running requests are answered, or at the
// drain deadline. A TCP close the daemon starts waits (at most k_linger) until the client has
// acknowledged the replies: closing with input unread would reset the connection and lose them.
// Everything runs on the session's io_context thread; the executor posts its replies there.
// No exception leaves a session.
#pragma once

#include <atomic>
#include <boost/asio.hpp>
#include <chrono>
#include <deque>
#include <memory>
#include <optional>
#include <string>

#include "daemon/metrics.h"
#include "daemon/request_handler.h"

namespace ktune {

// A session's socket, timers and coroutines name the io_context's executor type itself rather
// than the type-erased any_io_executor: every operation of a warm lookup (the yield, the read's
// completion, a reply posted from the executor) then skips the erased executor's calls
// (bench/NOTES.md).
using SessionExecutor = boost::asio::io_context::executor_type;
template <typename Protocol>
using SessionSocket = boost::asio::basic_stream_socket<Protocol, SessionExecutor>;
using UnixSessionSocket = SessionSocket<boost::asio::local::stream_protocol>;
using TcpSessionSocket = SessionSocket<boost::asio::ip::tcp>;

class SessionBase {
 public:
  virtual ~SessionBase() = default;
  // Closes the connection from any thread.
  virtual void close() = 0;
  // From any thread, when the daemon stops: takes no further request, writes the replies of the
  // requests already running as they complete, then closes; closes at `deadline` whatever is
  // still owed. A request it read but did not run is answered by one `unavailable` line with id
  // null (docs/protocol.md § Shutdown) before the close.
  virtual void drain(std::chrono::steady_clock::time_point deadline) = 0;
};

// What one connection may hold up; from server.* keys (config/config.h).
struct SessionLimits {
  std::chrono::milliseconds read_timeout{30000};         // server.read_timeout_ms
  std::chrono::milliseconds write_stall_timeout{30000};  // server.write_stall_timeout_ms
  size_t max_output_bytes = 4 << 20;                     // server.max_output_bytes
  // Time on the I/O thread after which a session lets the others run (see above); no config key:
  // the frame fuzzer sets 0 (yield before every line) to reach that path without slow lines.
  std::chrono::microseconds turn_budget{50};
};

template <typename Socket>
class Session final : public SessionBase, public std::enable_shared_from_this<Session<Socket>> {
 public:
  static constexpr size_t k_max_in_flight = 256;  // requests outstanding
  static constexpr size_t k_max_running = 4;      // requests not yet fully answered
  static constexpr std::chrono::seconds k_linger{1};  // close_gracefully()'s longest wait

  Session(Socket socket, RequestHandler& handler, Metrics& metrics, Peer peer,
          SessionLimits limits);
  ~Session() override;

  // Spawns the reader, the writer and the watchdog on the socket's executor.
  void start();
  void close() override;
  void drain(std::chrono::steady_clock::time_point deadline) override;

 private:
  struct Slot {
    std::string out;     // reply text not yet handed to the writer
    bool done = false;   // the last line arrived
    bool close = false;  // close the connection once this slot is written
  };

  using Timer =
      boost::asio::basic_waitable_timer<std::chrono::steady_clock,
                                        boost::asio::wait_traits<std::chrono::steady_clock>,
                                        SessionExecutor>;

  boost::asio::awaitable<void, SessionExecutor> read_loop();
  boost::asio::awaitable<void, SessionExecutor> write_loop();
  boost::asio::awaitable<void, SessionExecutor> watchdog();
  // Ends the connection after the last reply was written (TCP: FIN, then waits until the client
  // has acknowledged every byte, at most k_linger: daemon/tcp_close.h). REQUIRES: the reader has
  // ended.
  boost::asio::awaitable<void, SessionExecutor> close_gracefully();
  // Queues a complete reply (error lines, fast answers) behind the outstanding ones.
  void push_ready(std::string line, bool close);
  // The read deadline passed (a request line or its attachment incomplete): the closing notice.
  void push_timeout_notice();
  // Runs one request line (and its attachment, if it announced one) through the handler.
  void dispatch(std::string_view line, std::string attachment);
  void wake_writer() { m_write_signal.cancel(); }
  // Ends the reader's batch: sends the replies ready at the front (not a closing one) without
  // waiting, and wakes the writer for whatever is left. True when the socket took reply bytes.
  bool write_ready();
  // Whether the reader must wait before taking another request (the bounds above).
  bool must_pause() const;
  // The socket is non-blocking, so after a yield the reader tries a read itself before it waits
  // in async_read_some: what a client sent while the reader yielded is taken without an
  // asynchronous operation's round trip through the scheduler (a sixth of a warm lookup's
  // instructions: bench/NOTES.md). A client that waits for each reply has sent nothing yet when
  // the reader comes back to it alone on its thread, and async_read_some tries the socket once
  // more itself: after a read that found nothing, the next 1, 3, 7, then 15 go straight to the
  // wait, so such a client costs no second recv a request.
  bool try_read_now();
  void read_now_found(bool data);
  // Adds reply text to a slot the executor answers; `last` completes it.
  void append(Slot& slot, std::string text, bool last);
  void finish();

  Socket m_socket;
  RequestHandler& m_handler;  // the Dispatcher, or a test's scripted one
  Metrics& m_metrics;
  Peer m_peer;
  std::optional<Executor::Lane> m_lane;  // this client's cold lookups, one at a time
  SessionLimits m_limits;
  Timer m_timer;         // watchdog
  Timer m_write_signal;  // wakes the writer
  Timer m_read_signal;   // wakes the reader when a bound is no longer hit
  std::deque<std::shared_ptr<Slot>> m_slots;
  size_t m_running = 0;     // slots not done: requests still being answered
  size_t m_unsent = 0;      // reply bytes in slots and in the writer, not yet taken by the socket
  bool m_writing = false;   // a socket write is pending
  bool m_batching = false;  // the reader is answering a read's lines: write_ready() sends them
  std::string m_out;        // reply bytes taken from the slots, not yet sent (writer, write_ready)
  std::chrono::steady_clock::time_point m_write_progress;  // when it last moved bytes
  std::chrono::steady_clock::time_point m_last_activity;
  int m_read_misses = 0;  // reads tried now in a row that found the socket empty (capped at 4)
  int m_read_skip = 0;    // reads left to go straight to async_read_some
  bool m_timed_out = false;
  bool m_reading_done = false;
  bool m_draining = false;  // drain() was called: no further request runs
  std::chrono::steady_clock::time_point m_drain_deadline =
      std::chrono::steady_clock::time_point::max();
  boost::asio::cancellation_signal m_read_cancel;  // drain() ends the reader's pending read
  std::atomic<bool> m_done{false};  // also read by reply callbacks on executor threads
};

}  // namespace ktune
