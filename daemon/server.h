// Server: ktuned's listeners — the Unix socket, optional loopback TCP, and the metrics/health
// HTTP port (Boost.Beast: GET /metrics, /livez, /readyz; other methods 405) — on one Asio
// io_context.
//
// Two phases, so that a second daemon fails before it touches anything: bind() takes every
// listener (socket file, TCP port, metrics port) and fails with a hint naming what is in use;
// serve() starts accepting once the daemon behind the listeners is built. Clients that connect in
// between wait in the listen backlog.
//
// Each client connection is a Session (daemon/session.h) that lives on one of the session
// io_contexts, each run by one thread (one context per thread: no cross-thread handoff per
// request), assigned round-robin. The server only accepts, enforces the connection cap and the
// Unix peer check (daemon/access.h: who may connect, with read or admin rights), and closes
// everything on stop().
// A socket file left by a crashed daemon is detected (nothing answers on it) and replaced; a live
// daemon on the same path is an error. stop() may be called from any thread.
#pragma once

#include <atomic>
#include <boost/asio.hpp>
#include <chrono>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "config/config.h"
#include "daemon/access.h"
#include "daemon/dispatcher.h"
#include "daemon/metrics.h"
#include "daemon/session.h"

namespace ktune {

class Server {
 public:
  // `io` runs the listeners; sessions go to `session_contexts` round-robin (or to `io` if none).
  // Without a dispatcher, serve(dispatcher) names it later.
  Server(boost::asio::io_context& io, const DaemonConfig& config, Metrics& metrics,
         std::vector<boost::asio::io_context*> session_contexts = {});
  Server(boost::asio::io_context& io, const DaemonConfig& config, Dispatcher& dispatcher,
         Metrics& metrics, std::vector<boost::asio::io_context*> session_contexts = {});
  ~Server();

  // Binds every configured listener without accepting yet. Fails for an unknown
  // server.admin_group, or a socket or port in use (the message says which and what to do).
  Result<void> bind();
  // Starts accepting on the bound listeners. REQUIRES: bind() succeeded.
  void serve(Dispatcher& dispatcher);
  // bind() then serve() with the dispatcher given at construction.
  Result<void> start();
  // Why the daemon is not ready ("" when it is), asked on every GET /readyz; /livez only says
  // the process answers. Unset: ready while not stopped.
  void set_readiness(std::function<std::string()> readiness) { m_readiness = std::move(readiness); }
  // Stops accepting and removes the socket file; each connection takes no further request,
  // gets the replies of those already running, and closes (closed at server.drain_timeout_ms
  // whatever is still owed). Safe from any thread (the work is posted to the server's strand);
  // the io_contexts then run out of work.
  void stop();

  // Where the listeners ended up ("127.0.0.1:41234" when port 0 was asked for).
  std::string tcp_endpoint() const { return m_tcp_endpoint; }
  std::string metrics_endpoint() const { return m_metrics_endpoint; }

  // Sessions register themselves so stop() can close them.
  void track(const std::shared_ptr<SessionBase>& session);

 private:
  Result<void> listen_unix();
  Result<void> listen_tcp();
  Result<void> listen_metrics();
  // Accepts clients until the acceptor closes: peer checks, the connection cap, a Session each.
  template <typename Acceptor>
  boost::asio::awaitable<void> accept_clients(Acceptor& acceptor, Peer peer);
  Result<std::unique_ptr<boost::asio::ip::tcp::acceptor>> open_tcp(const std::string& address,
                                                                   int backlog, std::string& bound);
  boost::asio::awaitable<void> accept_metrics();
  // After an accept error other than a close: a pause (EMFILE would fail again at once).
  boost::asio::awaitable<void> accept_failed(const boost::system::error_code& ec);
  boost::asio::awaitable<void> serve_http(boost::asio::ip::tcp::socket socket);
  // The status and body for one GET of `target`.
  std::pair<int, std::string> route_http(std::string_view target, std::string& content_type);
  // /report: drawn on the executor (it scans the store), one at a time, so the strand that
  // accepts every connection and handles the signals never waits on it.
  boost::asio::awaitable<std::pair<int, std::string>> serve_report();
  bool at_capacity();
  // Why a new peer may not connect ("" when it may); sets a Unix peer's rights.
  std::string admit(UnixSessionSocket& socket, Peer& peer);
  std::string admit(TcpSessionSocket& socket, Peer& peer);

  // Closes the listeners; drains the connections until `drain_until`, or closes them (nullopt).
  void close_all(std::optional<std::chrono::steady_clock::time_point> drain_until);

  boost::asio::io_context& next_session_context();

  boost::asio::io_context& m_io;
  std::vector<boost::asio::io_context*> m_session_contexts;
  std::size_t m_next_context = 0;
  // Acceptors live on one strand: accept loops and stop() never touch them concurrently.
  boost::asio::strand<boost::asio::io_context::executor_type> m_strand;
  const DaemonConfig& m_config;
  Dispatcher* m_dispatcher = nullptr;  // set by serve()
  Metrics& m_metrics;
  std::function<std::string()> m_readiness;
  std::atomic<bool> m_stopping{false};
  std::optional<AccessPolicy> m_access;  // set by start()
  std::unique_ptr<boost::asio::local::stream_protocol::acceptor> m_unix;
  std::unique_ptr<boost::asio::ip::tcp::acceptor> m_tcp;
  std::unique_ptr<boost::asio::ip::tcp::acceptor> m_http;
  std::string m_tcp_endpoint;
  std::string m_metrics_endpoint;
  bool m_owns_socket_file = false;
  static constexpr int k_max_http_connections = 64;
  int m_http_open = 0;  // HTTP connections being served; on m_strand
  bool m_report_drawing = false;  // a /report is being drawn on the executor; on m_strand
  std::chrono::steady_clock::time_point m_last_accept_failure_log{};

  std::mutex m_sessions_mutex;
  std::list<std::weak_ptr<SessionBase>> m_sessions;
};

// Parses "host:port" for TCP listeners.
Result<boost::asio::ip::tcp::endpoint> parse_endpoint(const std::string& host_port);

}  // namespace ktune
