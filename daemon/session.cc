#include "daemon/session.h"

#include <boost/asio/experimental/awaitable_operators.hpp>

#include "config/log.h"

namespace ktune {

namespace asio = boost::asio;
using protocol::ErrorKind;

template <typename Socket>
Session<Socket>::Session(Socket socket, Dispatcher& dispatcher, Metrics& metrics, Peer peer,
                         std::chrono::milliseconds read_timeout)
    : m_socket(std::move(socket)),
      m_dispatcher(dispatcher),
      m_metrics(metrics),
      m_peer(peer),
      m_read_timeout(read_timeout),
      m_timer(m_socket.get_executor()),
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
  asio::co_spawn(
      m_socket.get_executor(), [self]() { return self->read_loop(); }, asio::detached);
  asio::co_spawn(
      m_socket.get_executor(), [self]() { return self->watchdog(); }, asio::detached);
}

template <typename Socket>
void Session<Socket>::close() {
  auto self = this->shared_from_this();
  asio::post(m_socket.get_executor(), [self] {
    boost::system::error_code ec;
    self->m_done = true;
    self->m_socket.close(ec);
    self->m_timer.cancel();
  });
}

template <typename Socket>
asio::awaitable<void> Session<Socket>::read_loop() {
  std::string in;
  std::string out;
  in.reserve(4096);
  boost::system::error_code ec;
  try {
    while (!m_done) {
      co_await asio::async_read_until(m_socket, asio::dynamic_buffer(in, protocol::k_max_frame),
                                      '\n', asio::redirect_error(asio::use_awaitable, ec));
      m_last_activity = std::chrono::steady_clock::now();
      if (ec == asio::error::not_found) {  // the buffer filled without a newline
        m_metrics.count_error(ErrorKind::frame_too_large);
        out =
            protocol::reply_error(nullptr, ErrorKind::frame_too_large,
                                  "request line exceeds " + std::to_string(protocol::k_max_frame) +
                                      " bytes; closing the connection");
        co_await asio::async_write(m_socket, asio::buffer(out),
                                   asio::redirect_error(asio::use_awaitable, ec));
        break;
      }
      if (ec == asio::error::operation_aborted && m_timed_out) {
        m_metrics.count_error(ErrorKind::timeout);
        out = protocol::reply_error(nullptr, ErrorKind::timeout,
                                    "no complete request within " +
                                        std::to_string(m_read_timeout.count()) +
                                        " ms; closing the connection");
        co_await asio::async_write(m_socket, asio::buffer(out),
                                   asio::redirect_error(asio::use_awaitable, ec));
        break;
      }
      if (ec) break;  // EOF, reset, closed by stop()

      // Answer every complete line in the buffer, in order, with one write.
      out.clear();
      size_t pos = 0;
      bool close_after = false;
      for (size_t nl; !close_after && (nl = in.find('\n', pos)) != std::string::npos;
           pos = nl + 1) {
        std::string_view line(in.data() + pos, nl - pos);
        if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
        if (line.find_first_not_of(" \t") == std::string_view::npos) continue;  // blank keep-alive
        Response r = m_dispatcher.handle(line, m_peer);
        out += r.line;
        close_after = r.close;
      }
      in.erase(0, pos);
      co_await asio::async_write(m_socket, asio::buffer(out),
                                 asio::redirect_error(asio::use_awaitable, ec));
      if (ec || close_after) break;
    }
  } catch (const std::exception& e) {
    log(LogLevel::error, "session_error", {{"what", e.what()}});
  }
  m_done = true;
  m_socket.close(ec);
  m_timer.cancel();
}

template <typename Socket>
asio::awaitable<void> Session<Socket>::watchdog() {
  boost::system::error_code ec;
  while (!m_done) {
    const auto deadline = m_last_activity + m_read_timeout;
    if (std::chrono::steady_clock::now() >= deadline) {
      if (m_timed_out) {  // the timeout reply itself did not go out in time
        m_socket.close(ec);
        co_return;
      }
      m_timed_out = true;
      m_last_activity = std::chrono::steady_clock::now();  // grace period for the error reply
      m_socket.cancel(ec);
      continue;
    }
    m_timer.expires_at(deadline);
    co_await m_timer.async_wait(asio::redirect_error(asio::use_awaitable, ec));
  }
}

template class Session<asio::local::stream_protocol::socket>;
template class Session<asio::ip::tcp::socket>;

}  // namespace ktune
