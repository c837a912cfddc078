#include "client/client.h"

#include <fstream>
#include <sstream>

#include <grp.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

namespace ktune {

using protocol::ErrorKind;
using protocol::Json;

namespace {

using Clock = std::chrono::steady_clock;

// The deadline `timeout` from now; none (time_point::max) for a zero timeout.
Clock::time_point deadline_after(std::chrono::milliseconds timeout) {
  return timeout.count() == 0 ? Clock::time_point::max() : Clock::now() + timeout;
}

int remaining_ms(Clock::time_point deadline) {
  if (deadline == Clock::time_point::max()) return -1;  // poll: no timeout
  const auto left =
      std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return left > 0 ? int(left) : 0;
}

// Waits until fd is ready for `events` or the deadline passes.
bool wait_for(int fd, short events, Clock::time_point deadline) {
  pollfd p{fd, events, 0};
  while (true) {
    const int r = ::poll(&p, 1, remaining_ms(deadline));
    if (r > 0) return true;
    if (r == 0) return false;
    if (errno != EINTR) return false;
  }
}

// The timeout error of a call given `timeout`; `why`, when not empty, follows the figure.
std::unexpected<protocol::Error> no_reply_within(std::chrono::milliseconds timeout,
                                                 std::string_view why = {}) {
  return protocol::error(ErrorKind::timeout, "no reply from ktuned within " +
                                                 std::to_string(timeout.count()) + " ms" +
                                                 std::string(why));
}

// connect(2) to a Unix socket by the deadline; 0 and the descriptor in `fd`, or the errno (EAGAIN
// when the deadline passed: a daemon that stopped accepting with its backlog full would otherwise
// hold connect() for good).
int connect_unix(const std::string& path, int& fd, Clock::time_point deadline) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.size() >= sizeof addr.sun_path) return ENAMETOOLONG;
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return errno;
  if (deadline != Clock::time_point::max()) {
    // Linux bounds a Unix stream connect's wait for backlog room by the send timeout.
    const auto left = std::max<std::int64_t>(
        1, std::chrono::duration_cast<std::chrono::microseconds>(deadline - Clock::now()).count());
    timeval tv{time_t(left / 1'000'000), suseconds_t(left % 1'000'000)};
    ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  }
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0) {
    const timeval none{};
    ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &none, sizeof none);
    return 0;
  }
  const int err = errno;
  ::close(fd);
  fd = -1;
  return err;
}

// connect(2) over TCP to one resolved address by the deadline; 0 and the descriptor in `fd`, or
// the errno (ETIMEDOUT when the deadline passed).
int connect_tcp(const addrinfo& ai, int& fd, Clock::time_point deadline) {
  fd = ::socket(ai.ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return errno;
  int err = 0;
  if (::connect(fd, ai.ai_addr, ai.ai_addrlen) != 0) {
    err = errno;
    if (err == EINPROGRESS) {
      socklen_t len = sizeof err;
      if (!wait_for(fd, POLLOUT, deadline))
        err = ETIMEDOUT;
      else if (::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0)
        err = errno;
    }
  }
  if (err != 0) {
    ::close(fd);
    fd = -1;
  }
  return err;
}

// The group that may open `path`: the socket's own, or, when its directory cannot even be
// entered, the nearest directory's above it (/run/ktune is the ktune group's, mode 0750).
std::string socket_group(const std::string& path) {
  std::string p = path;
  while (!p.empty()) {
    struct stat st {};
    if (::stat(p.c_str(), &st) == 0) {
      if (const group* g = ::getgrgid(st.st_gid)) return g->gr_name;
      return std::to_string(st.st_gid);
    }
    const auto slash = p.rfind('/');
    if (slash == std::string::npos || slash == 0) break;
    p.resize(slash);
  }
  return "";
}

std::string connect_failure(const std::string& path, int err, const std::string& also_tried) {
  std::string message = "cannot connect to ktuned at " + path + ": " + std::strerror(err);
  if (err == EACCES || err == EPERM) {
    const std::string group = socket_group(path);
    const std::string name = group.empty() ? "<the daemon's group>" : group;
    message += " (the socket is for members of " +
               (group.empty() ? std::string("the daemon's group") : "group '" + group + "'") +
               ": join it with `sudo usermod -aG " + name +
               " $USER` and log in again, or ask the node's admin; docs/operations.md)";
  } else if (err == ENOENT || err == ECONNREFUSED) {
    message += also_tried.empty() ? "" : "; nor at the node-wide " + also_tried;
    message += " (is ktuned running? start it with `ktuned`, or set KTUNE_SOCKET to its socket)";
  }
  return message;
}

// The daemon's notice that it closed an idle connection (a timeout with id null), written before
// a request sent on that connection arrived: over TCP the send still succeeds and the notice is
// what comes back. (Other errors without an id, e.g. frame_too_large, are the request's.)
bool is_idle_close_notice(const protocol::Reply& reply) {
  return reply.id.is_null() && !reply.ok && reply.error.kind == ErrorKind::timeout;
}

// Whether the daemon closes the connection after this error reply.
bool closes_connection(const protocol::Reply& reply) {
  const ErrorKind k = reply.error.kind;
  return k == ErrorKind::frame_too_large || k == ErrorKind::timeout ||
         k == ErrorKind::too_many_connections ||
         (k == ErrorKind::unavailable && reply.id.is_null());  // stopping
}

}  // namespace

std::string Client::default_socket_path() {
  if (const char* s = std::getenv("KTUNE_SOCKET"); s && *s) return s;
  if (const char* r = std::getenv("XDG_RUNTIME_DIR"); r && *r)
    return std::string(r) + "/ktune/ktuned.sock";
  return "/tmp/ktune-" + std::to_string(::getuid()) + "/ktuned.sock";
}

Client::Client(ClientOptions options) : m_options(std::move(options)) {
  if (m_options.socket_path.empty() && m_options.tcp_address.empty()) {
    m_options.socket_path = default_socket_path();
    const char* env = std::getenv("KTUNE_SOCKET");
    if (!(env && *env) && m_options.system_socket_path != m_options.socket_path)
      m_fallback_socket = m_options.system_socket_path;
  }
}

protocol::Expected<void> Client::connect_unix_locked(Clock::time_point deadline) {
  int fd = -1;
  const int err = connect_unix(m_options.socket_path, fd, deadline);
  if (err == 0) {
    m_fd = fd;
    return {};
  }
  if (err == EAGAIN)
    return protocol::error(ErrorKind::timeout, "ktuned at " + m_options.socket_path +
                                                   " did not accept the connection in time "
                                                   "(its backlog is full: is it stalled?)");
  if ((err == ENOENT || err == ECONNREFUSED) && !m_fallback_socket.empty()) {
    // No per-user daemon: the node-wide one, if there is one.
    const int system_err = connect_unix(m_fallback_socket, fd, deadline);
    if (system_err == 0) {
      m_options.socket_path = m_fallback_socket;  // reconnects go there too
      m_fallback_socket.clear();
      m_fd = fd;
      return {};
    }
    if (system_err != ENOENT && system_err != ECONNREFUSED)
      return protocol::error(ErrorKind::connection_failed,
                             connect_failure(m_fallback_socket, system_err, ""));
    return protocol::error(ErrorKind::connection_failed,
                           connect_failure(m_options.socket_path, err, m_fallback_socket));
  }
  return protocol::error(ErrorKind::connection_failed,
                         connect_failure(m_options.socket_path, err, ""));
}

Client::~Client() {
  disconnect_locked();
}

void Client::disconnect_locked() {
  if (m_fd >= 0) ::close(m_fd);
  m_fd = -1;
  m_pending.clear();
}

protocol::Expected<void> Client::connect_locked(Clock::time_point deadline) {
  if (m_fd >= 0) return {};
  if (m_options.tcp_address.empty()) return connect_unix_locked(deadline);
  const std::string where = m_options.tcp_address;
  const auto colon = where.rfind(':');
  if (colon == std::string::npos)
    return protocol::error(ErrorKind::connection_failed, "expected host:port, got " + where);
  // "[::1]:7781": the brackets only keep an IPv6 address's colons apart from the port's.
  std::string host = where.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']')
    host = host.substr(1, host.size() - 2);
  addrinfo hints{}, *res = nullptr;
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  if (const int rc = ::getaddrinfo(host.c_str(), where.substr(colon + 1).c_str(), &hints, &res);
      rc != 0 || !res)
    return protocol::error(
        ErrorKind::connection_failed,
        "cannot resolve " + where + ": " + (rc ? ::gai_strerror(rc) : "no address"));
  // Every address in turn: "localhost" may give ::1 and 127.0.0.1, and ktuned listens on one.
  int fd = -1, err = 0;
  for (const addrinfo* ai = res; ai; ai = ai->ai_next) {
    err = connect_tcp(*ai, fd, deadline);
    if (err == 0 || err == ETIMEDOUT) break;
  }
  ::freeaddrinfo(res);
  if (err != 0)
    return protocol::error(ErrorKind::connection_failed,
                           "cannot connect to ktuned at " + where + ": " + std::strerror(err));
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  m_fd = fd;
  return {};
}

protocol::Expected<void> Client::send_locked(const std::string& line, Clock::time_point deadline) {
  size_t sent = 0;
  while (sent < line.size()) {
    const ssize_t n =
        ::send(m_fd, line.data() + sent, line.size() - sent, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      sent += size_t(n);
    } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      if (!wait_for(m_fd, POLLOUT, deadline))
        return protocol::error(ErrorKind::timeout, "timed out sending to ktuned");
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else {
      return protocol::error(ErrorKind::connection_failed,
                             std::string("send to ktuned failed: ") + std::strerror(errno));
    }
  }
  return {};
}

protocol::Expected<std::string> Client::read_line_locked(Clock::time_point deadline,
                                                         std::chrono::milliseconds timeout) {
  char buf[65536];
  for (size_t scanned = 0;;) {
    // Only the bytes not searched yet: a 70 MB export arrives in thousands of pieces.
    if (const auto nl = m_pending.find('\n', scanned); nl != std::string::npos) {
      if (nl + 1 == m_pending.size()) {  // the usual case: nothing after the reply, no copy
        std::string reply = std::move(m_pending);
        m_pending.clear();
        reply.pop_back();
        return reply;
      }
      std::string reply = m_pending.substr(0, nl);
      m_pending.erase(0, nl + 1);
      return reply;
    }
    scanned = m_pending.size();
    const ssize_t n = ::recv(m_fd, buf, sizeof buf, MSG_DONTWAIT);
    if (n > 0) {
      m_pending.append(buf, size_t(n));
    } else if (n == 0) {
      return protocol::error(ErrorKind::connection_failed, "ktuned closed the connection");
    } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
      if (!wait_for(m_fd, POLLIN, deadline)) return no_reply_within(timeout);
    } else if (errno != EINTR) {
      return protocol::error(ErrorKind::connection_failed,
                             std::string("recv from ktuned failed: ") + std::strerror(errno));
    }
  }
}

protocol::Expected<std::string> Client::roundtrip_locked(const std::string& line,
                                                         Clock::time_point deadline,
                                                         std::chrono::milliseconds timeout) {
  if (auto ok = send_locked(line, deadline); !ok) return std::unexpected(ok.error());
  return read_line_locked(deadline, timeout);
}

protocol::Expected<std::string> Client::request_line_locked(const std::string& op, const Json& body,
                                                            std::uint64_t id) {
  Json request = {{"v", protocol::k_version}, {"id", id}, {"op", op}};
  for (auto it = body.begin(); it != body.end(); ++it) request[it.key()] = it.value();
  if (!m_options.tcp_address.empty() && !m_options.token.empty())
    request["token"] = m_options.token;
  try {
    return request.dump() + "\n";
  } catch (const Json::exception& e) {  // invalid UTF-8 in a string the caller gave
    return protocol::error(
        ErrorKind::bad_request,
        "'" + op + "' request not sent: a string is not valid UTF-8 (" + e.what() + ")");
  }
}

protocol::Expected<Json> Client::call(const std::string& op, Json body) {
  return call(op, std::move(body), std::string());
}

protocol::Expected<Json> Client::call(const std::string& op, Json body,
                                      const std::string& attachment) {
  return call_with_timeout(op, std::move(body), attachment, m_options.timeout);
}

protocol::Expected<Json> Client::call_with_timeout(const std::string& op, Json body,
                                                   const std::string& attachment,
                                                   std::chrono::milliseconds timeout) {
  const auto deadline = deadline_after(timeout);
  std::unique_lock lock(m_mutex, std::defer_lock);
  if (deadline == Clock::time_point::max())
    lock.lock();
  else if (!lock.try_lock_until(deadline))
    return no_reply_within(timeout, ": the connection was busy with another thread's request");
  const std::uint64_t id = m_next_id++;
  auto request = request_line_locked(op, body, id);
  if (!request) return std::unexpected(request.error());
  const std::string line = *request + attachment;
  // One retry on a connection that went away (daemon restarted since the last call).
  for (int attempt = 0; attempt < 2; ++attempt) {
    // Never sent past its deadline: the daemon would act on a request its caller gave up on.
    if (deadline != Clock::time_point::max() && Clock::now() >= deadline)
      return no_reply_within(timeout, "; the request was not sent");
    if (auto ok = connect_locked(deadline); !ok) return std::unexpected(ok.error());
    auto reply_line = roundtrip_locked(line, deadline, timeout);
    if (!reply_line) {
      disconnect_locked();
      if (reply_line.error().kind == ErrorKind::connection_failed && attempt == 0) continue;
      return std::unexpected(reply_line.error());
    }
    auto result = take_reply_locked(*reply_line, id, attempt == 0);
    if (!result) continue;  // closed while idle, before this request arrived: send again
    return std::move(*result);
  }
  return protocol::error(ErrorKind::connection_failed, "unreachable");
}

std::optional<protocol::Expected<Json>> Client::take_reply_locked(const std::string& line,
                                                                  std::uint64_t id,
                                                                  bool may_retry) {
  auto reply = protocol::parse_reply(line);
  if (!reply) {
    disconnect_locked();
    return std::unexpected(reply.error());
  }
  if (is_idle_close_notice(*reply) && may_retry) {
    disconnect_locked();
    return std::nullopt;
  }
  if (!reply->id.is_null() && reply->id != Json(id)) {
    disconnect_locked();
    return protocol::error(ErrorKind::connection_failed,
                           "ktuned answered another request (id " + reply->id.dump() + ")");
  }
  if (!reply->ok) {
    if (closes_connection(*reply)) disconnect_locked();
    return std::unexpected(reply->error);
  }
  return std::move(reply->result);
}

protocol::Expected<protocol::LookupReply> Client::lookup(const protocol::LookupRequest& request) {
  const Json body = protocol::to_json(request);
  std::string key;
  try {
    key = body.dump();
  } catch (const Json::exception& e) {  // invalid UTF-8 in the op, a dtype, the device, ...
    return protocol::error(
        ErrorKind::bad_request,
        std::string("lookup not sent: a string is not valid UTF-8 (") + e.what() + ")");
  }
  const auto now = Clock::now();
  if (m_options.cache_capacity > 0) {
    std::lock_guard lock(m_cache_mutex);
    if (auto it = m_cache.find(key); it != m_cache.end()) {
      if (it->second.expires > now) {
        m_lru.splice(m_lru.begin(), m_lru, it->second.lru);
        return it->second.reply;
      }
      m_lru.erase(it->second.lru);
      m_cache.erase(it);
    }
  }
  auto result = call("lookup", body);
  if (!result) return std::unexpected(result.error());
  auto reply = protocol::lookup_reply_from_json(*result);
  if (!reply) return reply;
  if (m_options.cache_capacity > 0) {
    std::lock_guard lock(m_cache_mutex);
    if (!m_cache.count(key)) {
      m_lru.push_front(key);
      m_cache.emplace(key, Cached{*reply, now + m_options.cache_ttl, m_lru.begin()});
      while (m_cache.size() > m_options.cache_capacity) {
        m_cache.erase(m_lru.back());
        m_lru.pop_back();
      }
    }
  }
  return reply;
}

protocol::Expected<protocol::KernelImage> Client::kernel(const protocol::KernelRequest& request) {
  auto result = call_with_timeout("kernel", protocol::to_json(request), std::string(),
                                  m_options.kernel_timeout);
  if (!result) return std::unexpected(result.error());
  return protocol::kernel_image_from_json(*result);
}

void Client::clear_cache() {
  std::lock_guard lock(m_cache_mutex);
  m_cache.clear();
  m_lru.clear();
}

protocol::Expected<Json> Client::status() {
  return call("status");
}
protocol::Expected<Json> Client::templates() {
  return call("templates");
}

protocol::Expected<Json> Client::export_table(const std::string& format,
                                              const std::string& device) {
  Json body = {{"format", format}};
  if (!device.empty()) body["device"] = device;
  return call("export", body);
}

protocol::Expected<Json> Client::import_table(const std::string& table, const std::string& origin) {
  // Small tables travel inline; larger ones as the request's attachment (docs/protocol.md).
  Json body = Json::object();
  if (!origin.empty()) body["origin"] = origin;
  if (table.size() < protocol::k_max_frame / 2) {
    body["table"] = table;
    return call("import", body);
  }
  body["attach"] = table.size();
  return call("import", body, table);
}

protocol::Expected<Json> Client::import_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  // Only a missing file is not_found; one that cannot be read (permissions, a directory) is not
  // a name the caller got wrong.
  if (!in)
    return protocol::error(errno == ENOENT ? ErrorKind::not_found : ErrorKind::bad_request,
                           path + ": cannot open: " + std::strerror(errno));
  std::ostringstream text;
  text << in.rdbuf();
  return import_table(text.str(), path);
}

protocol::Expected<Json> Client::tune(const protocol::ProblemSpec& problem, const TuneOptions& o) {
  Json body = {{"problem", protocol::to_json(problem)}};
  if (!o.device.empty()) body["device"] = o.device;
  if (!o.strategy.empty()) body["strategy"] = o.strategy;
  if (o.budget_trials > 0) body["budget_trials"] = o.budget_trials;
  if (o.budget_seconds > 0) body["budget_seconds"] = o.budget_seconds;
  if (!o.templates.empty()) body["templates"] = o.templates;
  if (!o.seeds.empty()) body["seeds"] = o.seeds;
  return call("tune", body);
}

protocol::Expected<Json> Client::plan(const std::string& plan_text, const std::string& device) {
  Json body = {{"plan", plan_text}};
  if (!device.empty()) body["device"] = device;
  return call("plan", body);
}

protocol::Expected<Json> Client::jobs(int limit, const std::string& state) {
  Json body = {{"limit", limit}};
  if (!state.empty()) body["state"] = state;
  return call("jobs", body);
}

protocol::Expected<Json> Client::job(const std::string& id) {
  return call("job", {{"job", id}});
}

protocol::Expected<Json> Client::cancel(const std::string& id) {
  return call("cancel", {{"job", id}});
}

protocol::Expected<Json> Client::misses(int limit) {
  return call("misses", {{"limit", limit}});
}

protocol::Expected<Json> Client::watch(const std::string& id,
                                       const std::function<void(const Json&)>& on_event,
                                       std::chrono::milliseconds quiet_timeout) {
  std::lock_guard lock(m_mutex);
  const std::uint64_t request_id = m_next_id++;
  auto line = request_line_locked("watch", {{"job", id}}, request_id);
  if (!line) return std::unexpected(line.error());
  // As call_with_timeout: one retry on a connection that went away (the daemon restarted) or that
  // the daemon closed while it was idle (its notice is then what comes back first). Only before
  // the first event, so that the caller never gets an event twice.
  bool streaming = false;
  for (int attempt = 0; attempt < 2; ++attempt) {
    const bool may_retry = attempt == 0;
    if (auto ok = connect_locked(deadline_after(m_options.timeout)); !ok)
      return std::unexpected(ok.error());
    if (auto ok = send_locked(*line, deadline_after(m_options.timeout)); !ok) {
      disconnect_locked();
      if (ok.error().kind == ErrorKind::connection_failed && may_retry) continue;
      return std::unexpected(ok.error());
    }
    while (true) {
      auto text = read_line_locked(deadline_after(quiet_timeout), quiet_timeout);
      if (!text) {
        disconnect_locked();  // the rest of the stream would confuse the next call
        if (text.error().kind == ErrorKind::connection_failed && may_retry && !streaming) break;
        return std::unexpected(text.error());
      }
      Json j;
      try {
        j = Json::parse(*text);
      } catch (const Json::exception& e) {  // syntax, invalid UTF-8, a number out of range
        disconnect_locked();
        return protocol::error(ErrorKind::parse_error,
                               std::string("daemon reply is not JSON: ") + e.what());
      }
      if (j.contains("event")) {
        streaming = true;
        if (on_event) on_event(j["event"]);
        continue;
      }
      auto result = take_reply_locked(*text, request_id, may_retry && !streaming);
      if (!result) break;  // the daemon's idle-close notice: connect and send again
      return std::move(*result);
    }
  }
  return protocol::error(ErrorKind::connection_failed, "unreachable");
}

}  // namespace ktune
