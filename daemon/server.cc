#include "daemon/server.h"

#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <boost/asio/experimental/awaitable_operators.hpp>
#include <filesystem>

#include "config/log.h"
#include "daemon/session.h"

namespace ktune {

namespace asio = boost::asio;
using unix_proto = asio::local::stream_protocol;
using asio::ip::tcp;
using protocol::ErrorKind;

namespace {

// Whether a daemon answers on the socket file at `path`.
bool socket_is_live(const std::string& path) {
  asio::io_context io;
  unix_proto::socket probe(io);
  boost::system::error_code ec;
  probe.connect(unix_proto::endpoint(path), ec);
  return !ec;
}

// Writes one error line and closes; for connections refused before a session exists.
template <typename Socket>
asio::awaitable<void> refuse(Socket socket, std::string line) {
  boost::system::error_code ec;
  co_await asio::async_write(socket, asio::buffer(line),
                             asio::redirect_error(asio::use_awaitable, ec));
  socket.close(ec);
}

}  // namespace

Result<tcp::endpoint> parse_endpoint(const std::string& host_port) {
  const auto colon = host_port.rfind(':');
  if (colon == std::string::npos)
    return fail(ErrorCode::invalid_argument, "expected host:port, got " + host_port);
  std::string host = host_port.substr(0, colon);
  if (host == "localhost") host = "127.0.0.1";
  if (host.size() > 2 && host.front() == '[') host = host.substr(1, host.size() - 2);
  boost::system::error_code ec;
  const auto addr = asio::ip::make_address(host, ec);
  if (ec) return fail(ErrorCode::invalid_argument, "not an IP address: " + host);
  return tcp::endpoint(addr, static_cast<unsigned short>(std::stoi(host_port.substr(colon + 1))));
}

Server::Server(asio::io_context& io, const DaemonConfig& config, Dispatcher& dispatcher,
               Metrics& metrics)
    : m_io(io),
      m_strand(asio::make_strand(io)),
      m_config(config),
      m_dispatcher(dispatcher),
      m_metrics(metrics) {}

Server::~Server() {
  close_all();
}  // the io_context is no longer running here

Result<void> Server::start() {
  if (!m_config.socket_path.empty())
    if (auto ok = listen_unix(); !ok) return ok;
  if (!m_config.tcp_address.empty())
    if (auto ok = listen_tcp(); !ok) return ok;
  if (!m_config.metrics_address.empty())
    if (auto ok = listen_metrics(); !ok) return ok;
  return {};
}

Result<void> Server::listen_unix() {
  namespace fs = std::filesystem;
  const std::string& path = m_config.socket_path;
  std::error_code fec;
  const fs::path dir = fs::path(path).parent_path();
  if (!dir.empty() && !fs::exists(dir, fec)) {
    fs::create_directories(dir, fec);
    if (fec)
      return fail(ErrorCode::io_error,
                  dir.string() + ": cannot create socket directory: " + fec.message());
    ::chmod(dir.c_str(), 0750);
  }
  if (fs::exists(fs::symlink_status(path, fec))) {
    if (socket_is_live(path))
      return fail(ErrorCode::already_exists, path + ": another ktuned is serving on this socket");
    if (!fs::is_socket(fs::symlink_status(path, fec)))
      return fail(ErrorCode::already_exists,
                  path + ": exists and is not a socket; refusing to replace it");
    log(LogLevel::warn, "stale_socket_removed", {{"path", path}});
    fs::remove(path, fec);
  }
  boost::system::error_code ec;
  m_unix = std::make_unique<unix_proto::acceptor>(m_strand);
  m_unix->open(unix_proto(), ec);
  if (!ec) m_unix->bind(unix_proto::endpoint(path), ec);
  if (!ec) m_unix->listen(asio::socket_base::max_listen_connections, ec);
  if (ec) return fail(ErrorCode::io_error, path + ": cannot listen: " + ec.message());
  m_owns_socket_file = true;
  ::chmod(path.c_str(), 0660);
  asio::co_spawn(m_strand, accept_unix(), asio::detached);
  return {};
}

Result<void> Server::listen_tcp() {
  auto ep = parse_endpoint(m_config.tcp_address);
  if (!ep) return std::unexpected(ep.error());
  boost::system::error_code ec;
  m_tcp = std::make_unique<tcp::acceptor>(m_strand);
  m_tcp->open(ep->protocol(), ec);
  if (!ec) m_tcp->set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) m_tcp->bind(*ep, ec);
  if (!ec) m_tcp->listen(asio::socket_base::max_listen_connections, ec);
  if (ec)
    return fail(ErrorCode::io_error, m_config.tcp_address + ": cannot listen: " + ec.message());
  const auto bound = m_tcp->local_endpoint();
  m_tcp_endpoint = bound.address().to_string() + ":" + std::to_string(bound.port());
  asio::co_spawn(m_strand, accept_tcp(), asio::detached);
  return {};
}

Result<void> Server::listen_metrics() {
  auto ep = parse_endpoint(m_config.metrics_address);
  if (!ep) return std::unexpected(ep.error());
  boost::system::error_code ec;
  m_http = std::make_unique<tcp::acceptor>(m_strand);
  m_http->open(ep->protocol(), ec);
  if (!ec) m_http->set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) m_http->bind(*ep, ec);
  if (!ec) m_http->listen(64, ec);
  if (ec)
    return fail(ErrorCode::io_error,
                "metrics " + m_config.metrics_address + ": cannot listen: " + ec.message());
  const auto bound = m_http->local_endpoint();
  m_metrics_endpoint = bound.address().to_string() + ":" + std::to_string(bound.port());
  asio::co_spawn(m_strand, accept_metrics(), asio::detached);
  return {};
}

bool Server::at_capacity() {
  return m_metrics.connections() >= m_config.max_connections;
}

void Server::track(const std::shared_ptr<SessionBase>& session) {
  std::lock_guard lock(m_sessions_mutex);
  std::erase_if(m_sessions, [](const auto& w) { return w.expired(); });
  m_sessions.push_back(session);
}

asio::awaitable<void> Server::accept_unix() {
  const auto timeout = std::chrono::milliseconds(m_config.read_timeout_ms);
  while (m_unix && m_unix->is_open()) {
    boost::system::error_code ec;
    unix_proto::socket socket(asio::make_strand(m_io));
    co_await m_unix->async_accept(socket, asio::redirect_error(asio::use_awaitable, ec));
    if (ec) {
      if (ec == asio::error::operation_aborted) co_return;
      continue;
    }
    // Only this user, root, or members of this group (the socket is mode 0660).
    ucred cred{};
    socklen_t len = sizeof cred;
    if (::getsockopt(socket.native_handle(), SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0 &&
        cred.uid != ::getuid() && cred.uid != 0 && cred.gid != ::getgid()) {
      m_metrics.count_error(ErrorKind::unauthorized);
      asio::co_spawn(
          socket.get_executor(),
          refuse(std::move(socket), protocol::reply_error(nullptr, ErrorKind::unauthorized,
                                                          "peer uid " + std::to_string(cred.uid) +
                                                              " may not use this daemon")),
          asio::detached);
      continue;
    }
    if (at_capacity()) {
      m_metrics.connection_refused();
      m_metrics.count_error(ErrorKind::too_many_connections);
      asio::co_spawn(
          socket.get_executor(),
          refuse(std::move(socket),
                 protocol::reply_error(nullptr, ErrorKind::too_many_connections,
                                       "ktuned is at its connection cap (" +
                                           std::to_string(m_config.max_connections) + ")")),
          asio::detached);
      continue;
    }
    auto session = std::make_shared<Session<unix_proto::socket>>(std::move(socket), m_dispatcher,
                                                                 m_metrics, Peer{false}, timeout);
    track(session);
    session->start();
  }
}

asio::awaitable<void> Server::accept_tcp() {
  const auto timeout = std::chrono::milliseconds(m_config.read_timeout_ms);
  while (m_tcp && m_tcp->is_open()) {
    boost::system::error_code ec;
    tcp::socket socket(asio::make_strand(m_io));
    co_await m_tcp->async_accept(socket, asio::redirect_error(asio::use_awaitable, ec));
    if (ec) {
      if (ec == asio::error::operation_aborted) co_return;
      continue;
    }
    socket.set_option(tcp::no_delay(true), ec);
    if (at_capacity()) {
      m_metrics.connection_refused();
      m_metrics.count_error(ErrorKind::too_many_connections);
      asio::co_spawn(
          socket.get_executor(),
          refuse(std::move(socket), protocol::reply_error(nullptr, ErrorKind::too_many_connections,
                                                          "ktuned is at its connection cap")),
          asio::detached);
      continue;
    }
    auto session = std::make_shared<Session<tcp::socket>>(std::move(socket), m_dispatcher,
                                                          m_metrics, Peer{true}, timeout);
    track(session);
    session->start();
  }
}

asio::awaitable<void> Server::accept_metrics() {
  while (m_http && m_http->is_open()) {
    boost::system::error_code ec;
    tcp::socket socket(m_strand);
    co_await m_http->async_accept(socket, asio::redirect_error(asio::use_awaitable, ec));
    if (ec) {
      if (ec == asio::error::operation_aborted) co_return;
      continue;
    }
    asio::co_spawn(m_strand, serve_http(std::move(socket)), asio::detached);
  }
}

asio::awaitable<void> Server::serve_http(tcp::socket s) {
  // One small request per connection: read the head (bounded in size and time), answer, close.
  using namespace asio::experimental::awaitable_operators;
  boost::system::error_code e;
  std::string head;
  asio::steady_timer timer(s.get_executor(), std::chrono::seconds(5));
  auto read = co_await (asio::async_read_until(s, asio::dynamic_buffer(head, 8192), "\r\n\r\n",
                                               asio::redirect_error(asio::use_awaitable, e)) ||
                        timer.async_wait(asio::use_awaitable));
  if (read.index() != 0 || e) {
    s.close(e);
    co_return;
  }
  const auto sp1 = head.find(' '), sp2 = head.find(' ', sp1 + 1);
  const std::string path = sp1 == std::string::npos ? "" : head.substr(sp1 + 1, sp2 - sp1 - 1);
  std::string status = "200 OK", type = "text/plain; charset=utf-8", body;
  if (path == "/metrics") {
    type = "text/plain; version=0.0.4; charset=utf-8";
    body = m_metrics.prometheus(m_dispatcher.metrics_gauges());
  } else if (path == "/livez" || path == "/readyz") {
    body = "ok\n";
  } else {
    status = "404 Not Found";
    body = "not found; try /metrics, /livez, /readyz\n";
  }
  const std::string reply = "HTTP/1.1 " + status + "\r\nContent-Type: " + type +
                            "\r\nContent-Length: " + std::to_string(body.size()) +
                            "\r\nConnection: close\r\n\r\n" + body;
  co_await asio::async_write(s, asio::buffer(reply), asio::redirect_error(asio::use_awaitable, e));
  s.close(e);
}

void Server::stop() {
  asio::post(m_strand, [this] { close_all(); });
}

void Server::close_all() {
  boost::system::error_code ec;
  if (m_unix) m_unix->close(ec);
  if (m_tcp) m_tcp->close(ec);
  if (m_http) m_http->close(ec);
  std::list<std::weak_ptr<SessionBase>> sessions;
  {
    std::lock_guard lock(m_sessions_mutex);
    sessions.swap(m_sessions);
  }
  for (auto& w : sessions)
    if (auto s = w.lock()) s->close();
  if (m_owns_socket_file) {
    std::error_code fec;
    std::filesystem::remove(m_config.socket_path, fec);
    m_owns_socket_file = false;
  }
}

}  // namespace ktune
