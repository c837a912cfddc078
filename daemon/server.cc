#include "daemon/server.h"

#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <filesystem>

#include "config/log.h"
#include "daemon/report_page.h"
#include "daemon/session.h"
#include "daemon/tcp_close.h"

namespace ktune {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
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

Server::Server(asio::io_context& io, const DaemonConfig& config, Metrics& metrics,
               std::vector<asio::io_context*> session_contexts)
    : m_io(io),
      m_session_contexts(std::move(session_contexts)),
      m_strand(asio::make_strand(io)),
      m_config(config),
      m_metrics(metrics) {}

Server::Server(asio::io_context& io, const DaemonConfig& config, Dispatcher& dispatcher,
               Metrics& metrics, std::vector<asio::io_context*> session_contexts)
    : Server(io, config, metrics, std::move(session_contexts)) {
  m_dispatcher = &dispatcher;
}

Server::~Server() {
  close_all(std::nullopt);
}  // the io_context is no longer running here

Result<void> Server::start() {
  if (auto ok = bind(); !ok) return ok;
  serve(*m_dispatcher);
  return {};
}

void Server::serve(Dispatcher& dispatcher) {
  m_dispatcher = &dispatcher;
  if (m_unix)
    asio::co_spawn(m_strand, accept_clients(*m_unix, Peer{false, Rights::none}), asio::detached);
  if (m_tcp) asio::co_spawn(m_strand, accept_clients(*m_tcp, Peer{true}), asio::detached);
  if (m_http) asio::co_spawn(m_strand, accept_metrics(), asio::detached);
}

Result<void> Server::bind() {
  auto access = AccessPolicy::create(m_config);
  if (!access) return std::unexpected(access.error());
  m_access.emplace(std::move(*access));
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
      return fail(ErrorCode::already_exists,
                  path +
                      ": another ktuned is serving on this socket (stop it, or give this one "
                      "another socket: --socket PATH or server.socket)");
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
  return {};
}

Result<std::unique_ptr<tcp::acceptor>> Server::open_tcp(const std::string& address, int backlog,
                                                        std::string& bound) {
  auto ep = parse_endpoint(address);
  if (!ep) return std::unexpected(ep.error());
  boost::system::error_code ec;
  auto acceptor = std::make_unique<tcp::acceptor>(m_strand);
  acceptor->open(ep->protocol(), ec);
  if (!ec) acceptor->set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) acceptor->bind(*ep, ec);
  if (!ec) acceptor->listen(backlog, ec);
  if (ec == asio::error::address_in_use)
    return fail(ErrorCode::already_exists,
                address + ": cannot listen: " + ec.message() +
                    " (another ktuned, or another program, holds this port; give this one a free "
                    "host:port, port 0 for any)");
  if (ec) return fail(ErrorCode::io_error, address + ": cannot listen: " + ec.message());
  const auto local = acceptor->local_endpoint();
  bound = local.address().to_string() + ":" + std::to_string(local.port());
  return acceptor;
}

Result<void> Server::listen_tcp() {
  auto acceptor =
      open_tcp(m_config.tcp_address, asio::socket_base::max_listen_connections, m_tcp_endpoint);
  if (!acceptor) return fail(acceptor.error().code, "server.tcp " + acceptor.error().message);
  m_tcp = std::move(*acceptor);
  return {};
}

Result<void> Server::listen_metrics() {
  auto acceptor = open_tcp(m_config.metrics_address, 64, m_metrics_endpoint);
  if (!acceptor)
    return fail(acceptor.error().code,
                "server.metrics " + acceptor.error().message +
                    (acceptor.error().code == ErrorCode::already_exists
                         ? "; or server.metrics \"\" to turn the metrics port off"
                         : ""));
  m_http = std::move(*acceptor);
  return {};
}

asio::io_context& Server::next_session_context() {
  if (m_session_contexts.empty()) return m_io;
  return *m_session_contexts[m_next_context++ % m_session_contexts.size()];
}

bool Server::at_capacity() {
  return m_metrics.connections() >= m_config.max_connections;
}

void Server::track(const std::shared_ptr<SessionBase>& session) {
  std::lock_guard lock(m_sessions_mutex);
  std::erase_if(m_sessions, [](const auto& w) { return w.expired(); });
  m_sessions.push_back(session);
}

std::string Server::admit(UnixSessionSocket& socket, Peer& peer) {
  // The socket is mode 0660, so others cannot even open it; this is the second lock, and where
  // the peer's rights (read or admin) come from.
  auto credentials = peer_credentials(socket.native_handle());
  if (!credentials) return credentials.error().message;
  peer.rights = m_access->unix_rights(*credentials);
  return peer.rights == Rights::none ? m_access->refusal(*credentials) : "";
}

std::string Server::admit(TcpSessionSocket& socket, Peer& /*peer*/) {
  boost::system::error_code ec;
  socket.set_option(tcp::no_delay(true), ec);
  return "";  // TCP peers are checked per request (token), see Dispatcher
}

template <typename Acceptor>
asio::awaitable<void> Server::accept_clients(Acceptor& acceptor, Peer peer) {
  using Socket = SessionSocket<typename Acceptor::protocol_type>;
  const SessionLimits limits{std::chrono::milliseconds(m_config.read_timeout_ms),
                             std::chrono::milliseconds(m_config.write_stall_timeout_ms),
                             size_t(m_config.max_output_bytes)};
  while (acceptor.is_open()) {
    boost::system::error_code ec;
    Socket socket(next_session_context());
    co_await acceptor.async_accept(socket, asio::redirect_error(asio::use_awaitable, ec));
    if (ec) {
      if (ec == asio::error::operation_aborted) co_return;
      co_await accept_failed(ec);
      continue;
    }
    Peer session_peer = peer;
    std::string why = admit(socket, session_peer);
    ErrorKind kind = ErrorKind::unauthorized;
    if (m_stopping) {  // accepted after stop() but before close_all(): no session to drain
      kind = ErrorKind::unavailable;
      why = "ktuned is stopping";
    }
    if (why.empty() && at_capacity()) {
      m_metrics.connection_refused();
      kind = ErrorKind::too_many_connections;
      why = "ktuned is at its connection cap (" + std::to_string(m_config.max_connections) + ")";
    }
    if (!why.empty()) {
      m_metrics.count_error(kind);
      log(LogLevel::info, "connection_refused",
          {{"code", protocol::to_string(kind)}, {"reason", why}});
      asio::co_spawn(socket.get_executor(),
                     refuse(std::move(socket), protocol::reply_error(nullptr, kind, why)),
                     asio::detached);
      continue;
    }
    auto session = std::make_shared<Session<Socket>>(std::move(socket), *m_dispatcher, m_metrics,
                                                     session_peer, limits);
    track(session);
    session->start();
  }
}

asio::awaitable<void> Server::accept_failed(const boost::system::error_code& ec) {
  // Out of descriptors (EMFILE/ENFILE): the pending connection stays in the backlog and accept
  // fails again at once, so retrying without a pause spins a core. Pause, and say so now and
  // then (the newcomers wait in the backlog until a descriptor is free).
  const auto now = std::chrono::steady_clock::now();
  if (now - m_last_accept_failure_log > std::chrono::seconds(10)) {
    m_last_accept_failure_log = now;
    log(LogLevel::warn, "accept_failed",
        {{"error", ec.message()},
         {"hint",
          "raise the open-file limit (LimitNOFILE in the unit) or lower "
          "server.max_connections"}});
  }
  asio::steady_timer pause(m_strand, std::chrono::milliseconds(100));
  boost::system::error_code ignored;
  co_await pause.async_wait(asio::redirect_error(asio::use_awaitable, ignored));
}

asio::awaitable<void> Server::accept_metrics() {
  while (m_http && m_http->is_open()) {
    boost::system::error_code ec;
    tcp::socket socket(m_strand);
    co_await m_http->async_accept(socket, asio::redirect_error(asio::use_awaitable, ec));
    if (ec) {
      if (ec == asio::error::operation_aborted) co_return;
      co_await accept_failed(ec);
      continue;
    }
    // Probes and scrapes are few and short: past the cap a connection is closed unanswered (and
    // counted), so idle ones cannot take the descriptors the JSON clients need; each has 1 s to
    // send its request (serve_http), so idle ones cannot keep the probes out for long either.
    if (m_http_open >= k_max_http_connections) {
      m_metrics.metrics_port_refused();
      socket.close(ec);
      continue;
    }
    ++m_http_open;  // here, not when serve_http starts: the next accept must see it
    asio::co_spawn(m_strand, serve_http(std::move(socket)), asio::detached);
  }
}

asio::awaitable<void> Server::serve_http(tcp::socket socket) {
  // One small request per connection, bounded in size and time: read it (within 1 s: a probe
  // or a scrape sends it at once), answer (within 5 s), close.
  struct Closed {  // accept_metrics counted it open; on the strand, as it reads the count
    int& open;
    ~Closed() { --open; }
  } closed{m_http_open};
  beast::tcp_stream stream(std::move(socket));
  stream.expires_after(std::chrono::seconds(1));
  beast::flat_buffer buffer(8192);
  http::request_parser<http::string_body> parser;
  parser.header_limit(8192);
  parser.body_limit(8192);
  boost::system::error_code ec;
  co_await http::async_read(stream, buffer, parser, asio::redirect_error(asio::use_awaitable, ec));
  http::response<http::string_body> response;
  response.keep_alive(false);
  std::string content_type = "text/plain; charset=utf-8";
  if (ec == http::error::header_limit) {
    response.result(http::status::request_header_fields_too_large);
    response.body() = "request header over 8 KiB\n";
  } else if (ec == http::error::body_limit) {
    response.result(http::status::payload_too_large);
    response.body() = "request body over 8 KiB\n";
  } else if (ec && ec.category() == http::make_error_code(http::error::bad_target).category() &&
             ec != http::error::end_of_stream && ec != http::error::partial_message) {
    // Not HTTP/1.x: the client learns why rather than seeing the connection drop.
    response.result(http::status::bad_request);
    response.body() = "malformed HTTP request (" + ec.message() + ")\n";
  } else if (ec) {  // the peer left, or the 5 s deadline passed: no one to answer
    stream.socket().close(ec);
    co_return;
  } else if (const auto& request = parser.get(); request.method() != http::verb::get) {
    response.version(request.version());
    response.result(http::status::method_not_allowed);
    response.set(http::field::allow, "GET");
    response.body() = "method not allowed: only GET (/metrics, /livez, /readyz, /report)\n";
  } else {
    response.version(request.version());
    const std::string target(request.target());
    std::pair<int, std::string> answer;
    if (target.substr(0, target.find('?')) == "/report") {  // (no co_await in a ?: with GCC 12)
      answer = co_await serve_report();
      if (answer.first == 200) content_type = "text/html; charset=utf-8";
    } else {
      answer = route_http(target, content_type);
    }
    response.result(static_cast<http::status>(answer.first));
    response.body() = std::move(answer.second);
  }
  response.set(http::field::content_type, content_type);
  response.prepare_payload();
  // After a request read only in part, closing with its rest unread would reset the connection
  // and could cut the response off (daemon/tcp_close.h).
  const bool unread = bool(ec);
  stream.expires_after(std::chrono::seconds(5));  // from now: a report may have taken a while
  co_await http::async_write(stream, response, asio::redirect_error(asio::use_awaitable, ec));
  stream.socket().shutdown(tcp::socket::shutdown_send, ec);
  if (unread && !ec)
    co_await wait_until_acknowledged(stream.socket(),
                                     std::chrono::steady_clock::now() + std::chrono::seconds(1));
  stream.socket().close(ec);
}

std::pair<int, std::string> Server::route_http(std::string_view target, std::string& content_type) {
  const std::string_view path = target.substr(0, target.find('?'));
  if (path == "/metrics") {
    content_type = "text/plain; version=0.0.4; charset=utf-8";
    return {200, m_metrics.prometheus(m_dispatcher->metrics_gauges())};
  }
  if (path == "/livez") return {200, "ok\n"};
  if (path == "/readyz") {
    std::string why = m_stopping ? "shutting down" : m_readiness ? m_readiness() : "";
    if (why.empty()) return {200, "ok\n"};
    return {503, "not ready: " + why + "\n"};
  }
  return {404, "not found; try /metrics, /livez, /readyz, /report\n"};
}

asio::awaitable<std::pair<int, std::string>> Server::serve_report() {
  if (!m_config.report_page)
    co_return std::pair{403,
                        std::string("/report is off (server.report: false): it would show this "
                                    "node's winners, jobs and store to anyone reaching this port. "
                                    "Turn it on where that is fine, or run `ktune report` over the "
                                    "socket.\n")};
  if (m_report_drawing)
    co_return std::pair{503, std::string("a report is being drawn; try again in a few seconds\n")};
  m_report_drawing = true;
  struct Done {
    bool& drawing;
    ~Done() { drawing = false; }
  } done{m_report_drawing};
  OpContext& ctx = m_dispatcher->context();
  Executor* executor = m_dispatcher->executor();
  if (!executor) co_return std::pair{200, render_report_page(ctx)};  // tests without threads
  // The page is drawn on an executor thread; its completion resumes this coroutine on the strand.
  std::string page =
      co_await asio::async_initiate<decltype(asio::use_awaitable), void(std::string)>(
          [executor, &ctx](auto handler) {
            auto h = std::make_shared<decltype(handler)>(std::move(handler));
            executor->post([h, &ctx] {
              std::string drawn;  // "" for a failure: an executor thread has no catch above it
              try {
                drawn = render_report_page(ctx);
              } catch (const std::exception& e) {
                log(LogLevel::error, "report_failed", {{"what", e.what()}});
              }
              auto ex = asio::get_associated_executor(*h);
              asio::post(ex, [h, drawn = std::move(drawn)]() mutable { (*h)(std::move(drawn)); });
            });
          },
          asio::use_awaitable);
  if (page.empty())
    co_return std::pair{500, std::string("the report could not be drawn; see the daemon's log\n")};
  co_return std::pair{200, std::move(page)};
}

void Server::stop() {
  m_stopping = true;
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::milliseconds(m_config.drain_timeout_ms);
  asio::post(m_strand, [this, deadline] { close_all(deadline); });
}

void Server::close_all(std::optional<std::chrono::steady_clock::time_point> drain_until) {
  boost::system::error_code ec;
  if (m_unix) m_unix->close(ec);
  if (m_tcp) m_tcp->close(ec);
  if (m_http) m_http->close(ec);
  std::list<std::weak_ptr<SessionBase>> sessions;
  {
    std::lock_guard lock(m_sessions_mutex);
    sessions.swap(m_sessions);
  }
  for (auto& w : sessions) {
    auto s = w.lock();
    if (!s) continue;
    if (drain_until)
      s->drain(*drain_until);
    else
      s->close();
  }
  if (m_owns_socket_file) {
    std::error_code fec;
    std::filesystem::remove(m_config.socket_path, fec);
    m_owns_socket_file = false;
  }
}

}  // namespace ktune
