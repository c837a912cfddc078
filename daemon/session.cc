#include "daemon/session.h"

#include <cstring>
#include <utility>

#include "config/log.h"
#include "daemon/access.h"
#include "daemon/tcp_close.h"

namespace ktune {

namespace asio = boost::asio;
using protocol::ErrorKind;

namespace {

constexpr asio::use_awaitable_t<SessionExecutor> k_await;

}  // namespace

template <typename Socket>
Session<Socket>::Session(Socket socket, RequestHandler& handler, Metrics& metrics, Peer peer,
                         SessionLimits limits)
    : m_socket(std::move(socket)),
      m_handler(handler),
      m_metrics(metrics),
      m_peer(peer),
      m_lane(handler.make_lane()),
      m_limits(limits),
      m_timer(m_socket.get_executor()),
      m_write_signal(m_socket.get_executor(), Timer::time_point::max()),
      m_read_signal(m_socket.get_executor(), Timer::time_point::max()),
      m_last_activity(std::chrono::steady_clock::now()) {
  m_metrics.connection_opened();
}

template <typename Socket>
Session<Socket>::~Session() {
  m_metrics.connection_closed();
}

template <typename Socket>
void Session<Socket>::start() {
  auto self = this->shared_from_this();
  boost::system::error_code ec;
  m_socket.non_blocking(true, ec);  // write_ready()'s send must never wait
  asio::co_spawn(
      m_socket.get_executor(), [self]() { return self->read_loop(); }, asio::detached);
  asio::co_spawn(
      m_socket.get_executor(), [self]() { return self->write_loop(); }, asio::detached);
  asio::co_spawn(
      m_socket.get_executor(), [self]() { return self->watchdog(); }, asio::detached);
}

template <typename Socket>
void Session<Socket>::close() {
  auto self = this->shared_from_this();
  asio::post(m_socket.get_executor(), [self] { self->finish(); });
}

template <typename Socket>
void Session<Socket>::drain(std::chrono::steady_clock::time_point deadline) {
  auto self = this->shared_from_this();
  asio::post(m_socket.get_executor(), [self, deadline] {
    if (self->m_done) return;
    self->m_draining = true;
    self->m_drain_deadline = deadline;
    // The pending read ends; a pending write is left alone (socket.cancel() would end both).
    // The receive side stays open: input the reader never takes is dropped at the close
    // (close_gracefully), and a client's write into a shut receive side would fail.
    self->m_read_cancel.emit(asio::cancellation_type::terminal);
    self->m_read_signal.cancel();  // a reader paused by the bounds stops waiting
    self->m_timer.cancel();        // the watchdog learns the deadline
  });
}

template <typename Socket>
void Session<Socket>::finish() {
  boost::system::error_code ec;
  m_done = true;
  m_socket.close(ec);
  m_timer.cancel();
  m_write_signal.cancel();
  m_read_signal.cancel();
}

template <typename Socket>
bool Session<Socket>::must_pause() const {
  return m_slots.size() >= k_max_in_flight || m_running >= k_max_running ||
         m_unsent > m_limits.max_output_bytes;
}

template <typename Socket>
void Session<Socket>::push_ready(std::string line, bool close) {
  auto slot = std::make_shared<Slot>();
  m_unsent += line.size();
  slot->out = std::move(line);
  slot->done = true;
  slot->close = close;
  m_slots.push_back(std::move(slot));
  if (!m_batching) wake_writer();
}

namespace {

// Empties a reply buffer; one that grew past 64 KiB (an export) gives its memory back, so an idle
// connection keeps no export-sized buffer.
void release(std::string& buf) {
  if (buf.capacity() > 64 * 1024)
    std::string().swap(buf);
  else
    buf.clear();
}

}  // namespace

template <typename Socket>
bool Session<Socket>::write_ready() {
  m_batching = false;
  if (m_done) return false;
  bool sent = false;
  // While no socket write is pending the writer is parked with m_out empty (or about to find it
  // non-empty: unsent bytes, or fast replies dispatch() appended): m_out and whatever is ready at
  // the front go now, and what the socket does not take stays in m_out, where the writer sends
  // it before anything behind it.
  if (!m_writing) {
    while (!m_slots.empty() && m_slots.front()->done && !m_slots.front()->close) {
      if (m_out.empty())
        m_out.swap(m_slots.front()->out);
      else
        m_out += m_slots.front()->out;
      m_slots.pop_front();
    }
    if (!m_out.empty()) {
      boost::system::error_code ec;
      size_t n = m_socket.write_some(asio::buffer(m_out), ec);
      if (ec == asio::error::would_block || ec == asio::error::try_again) {
        n = 0;
        ec.clear();
      }
      m_unsent -= n;
      if (ec) {  // the client is gone
        finish();
        return false;
      }
      sent = n > 0;
      if (n == m_out.size())
        release(m_out);
      else
        m_out.erase(0, n);
    }
  }
  // A reply still being answered wakes the writer itself when it completes (append).
  if (!m_out.empty() || (!m_slots.empty() && m_slots.front()->done)) wake_writer();
  return sent;
}

template <typename Socket>
void Session<Socket>::push_timeout_notice() {
  m_metrics.count_error(ErrorKind::timeout);
  push_ready(protocol::reply_error(nullptr, ErrorKind::timeout,
                                   "no complete request within " +
                                       std::to_string(m_limits.read_timeout.count()) +
                                       " ms; closing the connection"),
             true);
}

template <typename Socket>
bool Session<Socket>::try_read_now() {
  if (m_read_skip == 0) return true;
  --m_read_skip;
  return false;
}

template <typename Socket>
void Session<Socket>::read_now_found(bool data) {
  if (data) {
    m_read_misses = 0;
  } else {
    m_read_misses = std::min(m_read_misses + 1, 4);
    m_read_skip = (1 << m_read_misses) - 1;
  }
}

template <typename Socket>
void Session<Socket>::append(Slot& slot, std::string text, bool last) {
  m_unsent += text.size();
  if (slot.out.empty())
    slot.out = std::move(text);  // an export's reply is not copied
  else
    slot.out += text;
  if (last && !slot.done) {
    slot.done = true;
    --m_running;
    m_read_signal.cancel();
  }
  wake_writer();
}

template <typename Socket>
void Session<Socket>::dispatch(std::string_view line, std::string attachment) {
  if (attachment.empty()) {
    if (m_slots.empty() && !m_writing) {
      // Nothing owed ahead of this reply and no write in flight: a fast one goes straight into
      // the send buffer (behind what it holds unsent), without a slot or a string of its own.
      const size_t before = m_out.size();
      if (m_handler.append_fast(line, m_peer, m_out)) {
        m_unsent += m_out.size() - before;
        if (!m_batching) wake_writer();
        return;
      }
    } else if (auto fast = m_handler.try_fast(line, m_peer)) {
      return push_ready(std::move(*fast), false);
    }
  }
  auto slot = std::make_shared<Slot>();
  m_slots.push_back(slot);
  ++m_running;
  std::weak_ptr<Session> weak = this->shared_from_this();
  auto executor = m_socket.get_executor();
  m_handler.handle(
      line, std::move(attachment), m_peer,
      [weak, slot, executor](std::string text, bool last) {
        auto self = weak.lock();
        if (!self || self->m_done) return false;
        asio::post(executor, [weak, slot, text = std::move(text), last]() mutable {
          auto s = weak.lock();
          if (!s || s->m_done) return;
          s->append(*slot, std::move(text), last);
        });
        return true;
      },
      m_lane ? &*m_lane : nullptr);
}

template <typename Socket>
asio::awaitable<void, SessionExecutor> Session<Socket>::read_loop() {
  std::string in;
  in.reserve(4096);
  boost::system::error_code ec;
  const size_t max_attachment = m_handler.max_attachment_bytes();
  // Whether the line at hand may not run: the session is closing, or draining (then the line
  // and those after it get one notice instead of replies).
  auto stop_here = [this] {
    if (m_done) return true;
    if (!m_draining) return false;
    m_metrics.count_error(ErrorKind::unavailable);
    push_ready(protocol::reply_error(nullptr, ErrorKind::unavailable,
                                     "ktuned is stopping: this request and any sent after it on "
                                     "this connection were not run; closing the connection"),
               true);
    return true;
  };
  try {
    while (!m_done) {
      // Answer every complete line in the buffer, in order.
      size_t pos = 0;
      bool fatal = false;
      // The turn starts when the read that brought these lines completed (m_last_activity).
      auto turn = m_last_activity;
      bool answered = false;  // a line of this turn was handled: the clock is worth reading
      m_batching = true;  // replies wait for write_ready() (before every suspension below)
      for (size_t nl; !fatal && (nl = in.find('\n', pos)) != std::string::npos;) {
        std::string_view line(in.data() + pos, nl - pos);
        pos = nl + 1;
        if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
        if (line.find_first_not_of(" \t") == std::string_view::npos) continue;  // keep-alive
        // Fairness: lines that took more than turn_budget of this thread (cold lookups built
        // here) let the other connections' handlers run before the next one. Before a turn's
        // first line nothing has run (a client that waits for each reply sends one line a read).
        if (answered && std::chrono::steady_clock::now() - turn > m_limits.turn_budget) {
          m_metrics.session_yielded();
          write_ready();
          co_await asio::post(m_socket.get_executor(), k_await);
          m_batching = true;
          turn = std::chrono::steady_clock::now();
        }
        if (stop_here()) {
          fatal = true;
          break;
        }
        answered = true;
        if (looks_like_http(line)) {  // a browser or curl: never run what follows
          m_metrics.http_refused();
          push_ready(http_refusal(), true);
          fatal = true;
          break;
        }
        if (must_pause()) {  // bounds: wait until replies drain
          write_ready();
          while (!m_done && !m_draining && must_pause())
            co_await m_read_signal.async_wait(asio::redirect_error(k_await, ec));
          m_batching = true;
          if (stop_here()) {
            fatal = true;
            break;
          }
        }
        protocol::Json id;  // null unless an error names it
        int v = protocol::k_min_version;
        auto attach = protocol::attachment_size(line, max_attachment, &id, &v);
        if (!attach) {
          m_metrics.count_error(attach.error().kind);
          push_ready(protocol::reply_error(id, attach.error().kind, attach.error().message, v),
                     true);
          fatal = true;
          break;
        }
        if (*attach == 0) {
          dispatch(line, {});
          continue;
        }
        // The attachment follows the line: what is buffered, then the rest from the socket.
        const std::string request(line);
        std::string body = in.substr(pos, std::min(*attach, in.size() - pos));
        pos += body.size();
        if (body.size() < *attach) {
          const size_t have = body.size();
          body.resize(*attach);
          write_ready();
          co_await asio::async_read(m_socket, asio::buffer(body.data() + have, *attach - have),
                                    asio::bind_cancellation_slot(
                                        m_read_cancel.slot(), asio::redirect_error(k_await, ec)));
          m_last_activity = std::chrono::steady_clock::now();
          m_batching = true;
          if (ec || m_draining) {  // the client left or stalled, or the daemon stops: not run
            if (ec == asio::error::operation_aborted && m_timed_out)
              push_timeout_notice();
            else
              stop_here();
            fatal = true;
            break;
          }
        }
        dispatch(request, std::move(body));
      }
      const bool replied = write_ready();
      in.erase(0, std::min(pos, in.size()));
      if (fatal) break;
      while (!m_done && !m_draining && must_pause())  // backpressure: stop reading
        co_await m_read_signal.async_wait(asio::redirect_error(k_await, ec));
      if (m_done || m_draining) break;  // a partial line left in the buffer was never a request
      // A client that waits for its replies sends nothing before it has them: a read tried now
      // (Asio tries every read at once, before asking epoll) fails, one recv per request wasted.
      // Behind the other handlers queued on this thread it usually finds the next request.
      if (replied) {
        co_await asio::post(m_socket.get_executor(), k_await);
        if (m_done || m_draining) break;
      }
      // Reads until a newline arrives (a partial line does not hold off the read deadline), what
      // the socket holds onto the buffer's tail without zero-filling it first; the loop above
      // finds the lines (async_read_until searched them once more, byte by byte).
      ec.clear();
      // Only the first read after the yield is tried here (try_read_now): any other read goes
      // through the scheduler's queue, so a client whose lines get no reply at once (blank
      // keep-alive lines) cannot keep this thread from the other connections.
      bool yielded = replied;
      for (bool line = false; !line && !ec;) {
        if (m_timed_out || m_draining) {  // the watchdog fired, or drain() found no read to end,
          ec = asio::error::operation_aborted;  // during the yield or the read before this one
        } else if (in.size() >= protocol::k_max_frame) {  // a full buffer without a newline
          ec = asio::error::not_found;
        } else {
          const size_t have = in.size();
          const size_t room =
              std::min(std::max<size_t>(4096, in.capacity() - have), protocol::k_max_frame - have);
          in.resize_and_overwrite(have + room, [](char*, size_t n) { return n; });
          size_t n = 0;
          bool empty = true;  // nothing read yet: wait for it
          if (std::exchange(yielded, false) && try_read_now()) {
            n = m_socket.read_some(asio::buffer(in.data() + have, room), ec);
            empty = ec == asio::error::would_block || ec == asio::error::try_again;
            read_now_found(!empty);
            if (empty) ec.clear();
          }
          if (empty)
            n = co_await m_socket.async_read_some(
                asio::buffer(in.data() + have, room),
                asio::bind_cancellation_slot(m_read_cancel.slot(),
                                             asio::redirect_error(k_await, ec)));
          in.resize(have + n);
          line = std::memchr(in.data() + have, '\n', n) != nullptr;
        }
      }
      m_last_activity = std::chrono::steady_clock::now();
      if (ec == asio::error::not_found) {  // the buffer filled without a newline
        m_metrics.count_error(ErrorKind::frame_too_large);
        push_ready(
            protocol::reply_error(nullptr, ErrorKind::frame_too_large,
                                  "request line exceeds " + std::to_string(protocol::k_max_frame) +
                                      " bytes; closing the connection"),
            true);
        break;
      }
      if (ec == asio::error::operation_aborted && m_timed_out) {
        push_timeout_notice();
        break;
      }
      if (ec) break;  // EOF, reset, closed by stop()
    }
  } catch (const std::exception& e) {
    log(LogLevel::error, "session_error", {{"what", e.what()}});
  }
  // Replies still owed are written before the connection closes (EOF after pipelining).
  m_batching = false;
  m_reading_done = true;
  wake_writer();
}

template <typename Socket>
asio::awaitable<void, SessionExecutor> Session<Socket>::write_loop() {
  boost::system::error_code ec;
  std::string& buf = m_out;  // may hold what write_ready() could not send: it goes first
  bool client_gone = false;  // a write failed: nothing to close gracefully
  try {
    while (!m_done) {
      bool close_after = false;
      while (!m_slots.empty() && !close_after) {
        Slot& head = *m_slots.front();
        if (buf.empty())
          buf.swap(head.out);  // a big reply is moved, not copied
        else
          buf += head.out;
        head.out.clear();
        if (!head.done) break;
        close_after = head.close;
        m_slots.pop_front();
      }
      if (buf.empty()) {
        if (m_reading_done && m_slots.empty()) break;
        co_await m_write_signal.async_wait(asio::redirect_error(k_await, ec));
        continue;
      }
      // Piece by piece, so the watchdog sees whether the client takes any bytes at all.
      m_writing = true;
      m_write_progress = std::chrono::steady_clock::now();
      ec.clear();  // the wake-up above left operation_aborted here
      for (size_t off = 0; off < buf.size() && !ec;) {
        const size_t n = co_await m_socket.async_write_some(
            asio::buffer(buf.data() + off, buf.size() - off), asio::redirect_error(k_await, ec));
        off += n;
        m_unsent -= n;
        m_write_progress = std::chrono::steady_clock::now();
        m_read_signal.cancel();
      }
      m_writing = false;
      m_last_activity = m_write_progress;
      release(buf);
      if (ec) {
        client_gone = true;
        break;
      }
      if (close_after) break;
    }
    if (!client_gone && !m_done) co_await close_gracefully();
  } catch (const std::exception& e) {
    log(LogLevel::error, "session_error", {{"what", e.what()}});
  }
  finish();
}

template <typename Socket>
asio::awaitable<void, SessionExecutor> Session<Socket>::close_gracefully() {
  if constexpr (std::is_same_v<typename Socket::protocol_type, asio::ip::tcp>) {
    boost::system::error_code ec;
    m_socket.shutdown(Socket::shutdown_send, ec);  // after the last reply the client reads EOF
    if (ec) co_return;
    // Input a drain or an error left unread would make the close a reset (daemon/tcp_close.h).
    co_await wait_until_acknowledged(
        m_socket, std::min(m_drain_deadline, std::chrono::steady_clock::now() + k_linger));
  }
}

template <typename Socket>
asio::awaitable<void, SessionExecutor> Session<Socket>::watchdog() {
  boost::system::error_code ec;
  while (!m_done) {
    const auto now = std::chrono::steady_clock::now();
    if (now >= m_drain_deadline) {  // the daemon stops: what is still owed is not waited for
      // Logged, not counted: the metrics port closes with the daemon.
      log(LogLevel::warn, "drain_cut", {{"requests_owed", m_running}, {"unsent_bytes", m_unsent}});
      finish();
      co_return;
    }
    // Wakes at least once per stall timeout: a write that starts after this wake-up cannot
    // pass its deadline before the next one.
    auto wake = std::min(now + m_limits.write_stall_timeout, m_drain_deadline);
    if (m_writing) {
      const auto stalled_since = m_write_progress;
      if (now - stalled_since >= m_limits.write_stall_timeout) {
        m_metrics.slow_reader_dropped();
        log(LogLevel::info, "slow_reader_dropped",
            {{"unsent_bytes", m_unsent},
             {"stalled_ms",
              std::chrono::duration_cast<std::chrono::milliseconds>(now - stalled_since).count()}});
        finish();
        co_return;
      }
      wake = std::min(wake, stalled_since + m_limits.write_stall_timeout);
    }
    if (!m_slots.empty() || m_reading_done || m_writing) {
      // Requests outstanding (a watch, a slow import) or a reply on its way (a big export to a
      // slow reader: the stall deadline above guards that): no read deadline.
      m_last_activity = now;
    } else {
      const auto deadline = m_last_activity + m_limits.read_timeout;
      if (now >= deadline) {
        if (m_timed_out) {  // the timeout reply itself did not go out in time
          finish();
          co_return;
        }
        m_timed_out = true;
        m_last_activity = now;  // grace period for the error reply
        m_socket.cancel(ec);
        continue;
      }
      wake = std::min(wake, deadline);
    }
    m_timer.expires_at(wake);
    co_await m_timer.async_wait(asio::redirect_error(k_await, ec));
  }
}

template class Session<UnixSessionSocket>;
template class Session<TcpSessionSocket>;

}  // namespace ktune
