// ktune-lookup-load: N concurrent clients doing lookups against ktuned over its Unix socket, the
// way redis-benchmark drives redis-server: one thread, an epoll loop over N connections, each
// keeping P requests in flight (pipelining). Prints throughput and latency percentiles; with
// --json, one JSON object. Latency is measured per batch (send of P requests to receipt of the
// P-th reply) and counted once per request, as redis-benchmark does.
//
//   ktune-lookup-load --socket S --clients 64 --pipeline 1 --seconds 5 [--request LINE] [--json]
//   ktune-lookup-load --socket REDIS_SOCK --redis ...   (GET key:000000000000, the same client
//                                                        driving redis-server, for a like-for-like
//                                                        comparison next to redis-benchmark)
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

struct Conn {
  int fd = -1;
  std::string out;  // unsent bytes of the current batch
  size_t replies_due = 0;
  int newlines = 0;  // seen of the current reply
  size_t scan_from = 0;
  std::string in;
  Clock::time_point batch_start;
};

int connect_unix(const std::string& path) {
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, path.c_str(), sizeof addr.sun_path - 1);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 && errno != EINPROGRESS) {
    std::perror("connect");
    std::exit(1);
  }
  return fd;
}

}  // namespace

int main(int argc, char** argv) {
  std::string socket_path, request;
  int clients = 1, pipeline = 1;
  double seconds = 5, warmup = 0.5;
  bool json = false, redis = false;
  CLI::App app{"ktune-lookup-load: concurrent lookups against ktuned"};
  app.add_option("--socket", socket_path, "ktuned's Unix socket")->required();
  app.add_option("--clients", clients, "concurrent connections")->capture_default_str();
  app.add_option("--pipeline", pipeline, "requests in flight per connection")
      ->capture_default_str();
  app.add_option("--seconds", seconds, "measured duration")->capture_default_str();
  app.add_option("--warmup", warmup, "unmeasured seconds first")->capture_default_str();
  app.add_option("--request", request, "request line (default: an exact gemm lookup)");
  app.add_flag("--json", json, "print one JSON object");
  app.add_flag("--redis", redis, "speak RESP: GET key:000000000000 (value set beforehand)");
  CLI11_PARSE(app, argc, argv);
  if (request.empty())
    request =
        R"({"v":1,"id":1,"op":"lookup","device":"nvidia-h200","problem":{"op":"gemm","dtype":"bf16","layout":"rc","dims":{"M":4096,"N":4096,"K":4096}}})";
  request += "\n";
  // A reply is one line for ktune; a RESP bulk string ("$3\r\nxyz\r\n") is two.
  const int newlines_per_reply = redis ? 2 : 1;
  if (redis) request = "*2\r\n$3\r\nGET\r\n$16\r\nkey:000000000000\r\n";
  std::string batch;
  for (int i = 0; i < pipeline; ++i) batch += request;

  const int ep = ::epoll_create1(0);
  std::vector<Conn> conns(static_cast<size_t>(clients));
  for (size_t i = 0; i < conns.size(); ++i) {
    conns[i].fd = connect_unix(socket_path);
    epoll_event ev{};
    ev.events = EPOLLIN | EPOLLOUT;
    ev.data.u64 = i;
    ::epoll_ctl(ep, EPOLL_CTL_ADD, conns[i].fd, &ev);
  }
  auto start_batch = [&](Conn& c) {
    c.out = batch;
    c.replies_due = size_t(pipeline);
    c.batch_start = Clock::now();
  };
  for (auto& c : conns) start_batch(c);

  std::vector<double> latencies_us;
  latencies_us.reserve(1 << 22);
  std::uint64_t completed = 0, errors = 0;
  const auto t0 = Clock::now();
  const auto measure_from = t0 + std::chrono::duration<double>(warmup);
  const auto stop_at = measure_from + std::chrono::duration<double>(seconds);
  bool measuring = false;
  std::vector<epoll_event> events(conns.size());
  char buf[1 << 16];
  while (true) {
    const auto now = Clock::now();
    if (now >= stop_at) break;
    if (!measuring && now >= measure_from) measuring = true;
    const int n = ::epoll_wait(ep, events.data(), int(events.size()), 100);
    for (int e = 0; e < n; ++e) {
      Conn& c = conns[events[e].data.u64];
      if (!c.out.empty() && (events[e].events & EPOLLOUT)) {
        const ssize_t w = ::send(c.fd, c.out.data(), c.out.size(), MSG_NOSIGNAL);
        if (w > 0) c.out.erase(0, size_t(w));
      }
      if (events[e].events & EPOLLIN) {
        ssize_t r;
        while ((r = ::recv(c.fd, buf, sizeof buf, 0)) > 0) c.in.append(buf, size_t(r));
        size_t nl;
        while (c.replies_due > 0 && (nl = c.in.find('\n', c.scan_from)) != std::string::npos) {
          static const std::string ok_prefix = "{\"v\":1,\"id\":1,\"ok\":true";
          if (++c.newlines < newlines_per_reply) {
            c.scan_from = nl + 1;
            continue;
          }
          if (redis ? c.in[0] != '$' : c.in.compare(0, ok_prefix.size(), ok_prefix) != 0) ++errors;
          c.in.erase(0, nl + 1);
          c.scan_from = 0;
          c.newlines = 0;
          --c.replies_due;
        }
        c.scan_from = c.in.size();
        if (c.replies_due == 0) {
          const auto done = Clock::now();
          if (measuring) {
            const double us =
                std::chrono::duration<double, std::micro>(done - c.batch_start).count();
            for (int i = 0; i < pipeline; ++i) latencies_us.push_back(us);
            completed += std::uint64_t(pipeline);
          }
          start_batch(c);
          const ssize_t w = ::send(c.fd, c.out.data(), c.out.size(), MSG_NOSIGNAL);
          if (w > 0) c.out.erase(0, size_t(w));
        }
      }
    }
  }
  std::sort(latencies_us.begin(), latencies_us.end());
  auto pct = [&](double p) {
    if (latencies_us.empty()) return 0.0;
    return latencies_us[std::min(latencies_us.size() - 1,
                                 size_t(p / 100.0 * double(latencies_us.size())))];
  };
  const double rps = double(completed) / seconds;
  if (json) {
    std::printf(
        "{\"clients\":%d,\"pipeline\":%d,\"seconds\":%.1f,\"requests\":%lu,\"errors\":%lu,\"rps\":%"
        ".0f,"
        "\"p50_us\":%.1f,\"p99_us\":%.1f,\"max_us\":%.1f}\n",
        clients, pipeline, seconds, (unsigned long)completed, (unsigned long)errors, rps, pct(50),
        pct(99), latencies_us.empty() ? 0.0 : latencies_us.back());
  } else {
    std::printf("clients %d pipeline %d: %.0f lookups/s, p50 %.1f us, p99 %.1f us, errors %lu\n",
                clients, pipeline, rps, pct(50), pct(99), (unsigned long)errors);
  }
  return errors ? 1 : 0;
}
