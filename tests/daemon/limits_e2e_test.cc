// Per-connection bounds end to end (docs/reliability.md § Limits and resources): clients that
// pipeline exports and never read, against a real ktuned. Label "e2e", run serially (it measures
// the daemon's RSS and another client's latency).
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <thread>
#include <vector>

#include "client/client.h"
#include "store/table_io.h"
#include "tests/fakes/daemon_probe.h"
#include "tests/fakes/daemon_process.h"
#include "tests/fakes/eventually.h"
#include "tests/fakes/test_records.h"

namespace ktune {
namespace {

using Clock = std::chrono::steady_clock;
using protocol::Json;
using testing::DaemonProcess;
using testing::TempDir;

// VmRSS or VmHWM of a process, in MiB.
double proc_mib(pid_t pid, const std::string& field) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(in, line);)
    if (line.starts_with(field + ":")) return std::stod(line.substr(field.size() + 1)) / 1024.0;
  return -1;
}

// Sends `count` export requests without reading, 64 lines per send, as far as the daemon takes
// them (it stops reading a connection past its bounds: then the socket buffer fills and a send
// would block). Returns the requests sent.
int pipeline_exports(int fd, int count) {
  int sent = 0;
  while (sent < count) {
    std::string batch;
    for (int i = 0; i < 64 && sent + i < count; ++i)
      batch += R"({"v":1,"id":)" + std::to_string(sent + i) +
               R"(,"op":"export","format":"json"})"
               "\n";
    const ssize_t n = ::send(fd, batch.data(), batch.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n != ssize_t(batch.size())) {  // full: count the whole lines that went in
      sent += n > 0 ? int(std::count(batch.begin(), batch.begin() + n, '\n')) : 0;
      break;
    }
    sent += int(std::count(batch.begin(), batch.end(), '\n'));
  }
  return sent;
}

#if defined(__SANITIZE_ADDRESS__)
// Instrumented, an export costs ~10x: a smaller table keeps the test in seconds, and a smaller
// output bound keeps its reply over the bound.
constexpr int k_winners = 150;
const std::string k_output_bound = "server.max_output_bytes=65536";
#else
constexpr int k_winners = 400;
const std::string k_output_bound = "server.max_output_bytes=262144";
#endif

// Waits until the daemon closes `fd` (POLLHUP/POLLRDHUP), at most `timeout`.
bool closed_by_peer(int fd, std::chrono::milliseconds timeout) {
  pollfd p{fd, POLLRDHUP, 0};
  return ::poll(&p, 1, int(timeout.count())) == 1 && (p.revents & (POLLRDHUP | POLLHUP));
}

// Four clients pipeline thousands of exports of a 400-winner table (150 under ASan) and never
// read. The daemon
// stops reading them once a few replies wait (its RSS stays bounded), still answers another
// client's status at once (the greedy ones hold at most 4 executor slots each), serves a big
// export to a client that reads, and drops the greedy ones after the write-stall deadline.
TEST(LimitsEndToEndTest, ClientsThatDoNotReadArePausedThenDropped) {
  TempDir dir;
  const std::string socket = dir / "ktuned.sock";
  DaemonProcess d(socket, dir / "data",
                  {"--set", "server.write_stall_timeout_ms=1500", "--set", k_output_bound, "--set",
                   "lookup.nearest_radius=0"});
#if defined(__SANITIZE_ADDRESS__)
  // Freed replies would sit in ASan's quarantine (256 MB by default) and count as RSS: keep it
  // small so RSS follows what the daemon holds (redzones and shadow memory still add to it).
  const char* asan = std::getenv("ASAN_OPTIONS");
  d.set_env({std::string("ASAN_OPTIONS=") + (asan ? asan : "") + ":quarantine_size_mb=8"});
#endif
  ASSERT_TRUE(d.start());
  ClientOptions o;
  o.socket_path = socket;
  o.timeout = std::chrono::seconds(60);
  o.cache_capacity = 0;
  Client client(o);
  std::vector<WinnerRecord> records;
  for (int i = 0; i < k_winners; ++i)
    records.push_back(testing::winner(testing::gemm_problem(16 + i, 4096, 4096), 10));
  ASSERT_TRUE(client.import_table(render_table(records, TableFormat::json)));
  const auto e0 = Clock::now();
  auto big = client.export_table("json");  // over the output bound: read as it comes
  const double export_ms = std::chrono::duration<double, std::milli>(Clock::now() - e0).count();
  ASSERT_TRUE(big) << big.error().message;
  ASSERT_EQ((*big)["count"], k_winners);
  const size_t reply_bytes = (*big)["content"].get_ref<const std::string&>().size();
  const double rss_before = proc_mib(d.pid(), "VmRSS");

  constexpr int k_greedy = 4, k_requests = 5000;
  std::vector<int> greedy;
  int sent = 0;
  for (int i = 0; i < k_greedy; ++i) {
    greedy.push_back(testing::unix_connect(socket));
    ASSERT_GE(greedy.back(), 0);
    sent += pipeline_exports(greedy.back(), k_requests);
  }
  // Once a reply reaches each greedy client, the daemon has taken its requests in.
  for (int fd : greedy) {
    pollfd p{fd, POLLIN, 0};
    ASSERT_EQ(::poll(&p, 1, 30'000), 1) << "no reply to a greedy client";
  }
  const auto t0 = Clock::now();
  auto s = client.status();
  const double status_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  ASSERT_TRUE(s) << s.error().message;

  for (int fd : greedy)
    EXPECT_TRUE(closed_by_peer(fd, std::chrono::seconds(30))) << "greedy connection not dropped";
  const double rss_peak = proc_mib(d.pid(), "VmHWM");
  for (int fd : greedy) ::close(fd);
  const std::string metrics =
      testing::http_get(testing::ready_field(d.log_path(), "metrics"), "/metrics");
  EXPECT_EQ(testing::prometheus_counter(metrics, "ktune_slow_readers_dropped_total"), k_greedy)
      << metrics;
  EXPECT_TRUE(client.status()) << "the daemon still serves";
  std::printf(
      "%d greedy clients sent %d export requests (%zu-byte replies, %.1f ms each): status in "
      "%.1f ms, RSS %.0f MiB before, peak %.0f MiB\n",
      k_greedy, sent, reply_bytes, export_ms, status_ms, rss_before, rss_peak);
  RecordProperty("status_ms", std::to_string(status_ms));
  RecordProperty("rss_growth_mib", std::to_string(rss_peak - rss_before));
  EXPECT_GT(sent, k_greedy * 1000) << "the clients pipelined thousands of requests";
  // Each paused connection holds at most its output bound plus the replies of the requests it
  // had running (4) and the socket buffer: a few MiB, not the thousands of replies it asked for.
  EXPECT_LT(rss_peak - rss_before, 100.0);
  // Status waits at most for the exports the greedy clients may have running (4 each, on two
  // executor threads: half this bound), not for the thousands they queued.
  EXPECT_LT(status_ms, k_greedy * 4 * export_ms + 50);
}

// A client that reads a big reply slowly but steadily keeps its connection: neither the read
// deadline (which used to fire while the reply was being written, cutting it off) nor the
// write-stall deadline applies while bytes move.
TEST(LimitsEndToEndTest, SlowSteadyReaderGetsTheWholeReply) {
  TempDir dir;
  const std::string socket = dir / "ktuned.sock";
  DaemonProcess d(
      socket, dir / "data",
      {"--set", "server.read_timeout_ms=200", "--set", "server.write_stall_timeout_ms=400"});
  ASSERT_TRUE(d.start());
  ClientOptions o;
  o.socket_path = socket;
  o.timeout = std::chrono::seconds(60);
  std::vector<WinnerRecord> records;
  for (int i = 0; i < k_winners; ++i)
    records.push_back(testing::winner(testing::gemm_problem(16 + i, 4096, 4096), 10));
  ASSERT_TRUE(Client(o).import_table(render_table(records, TableFormat::json)));
  const int fd = testing::unix_connect(socket);
  ASSERT_GE(fd, 0);
  int size = 4096;  // a small receive buffer, so the daemon's write waits on this reader
  ::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &size, sizeof size);
  const std::string request = R"({"v":1,"id":1,"op":"export","format":"json"})"
                              "\n";
  ASSERT_EQ(::send(fd, request.data(), request.size(), MSG_NOSIGNAL), ssize_t(request.size()));
  std::string reply;
  char buf[32768];
  const auto t0 = Clock::now();
  for (ssize_t n;
       reply.find('\n') == std::string::npos && (n = ::recv(fd, buf, sizeof buf, 0)) > 0;) {
    reply.append(buf, size_t(n));
    std::this_thread::sleep_for(std::chrono::milliseconds(20));  // a slow reader, on purpose
  }
  ::close(fd);
  const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  ASSERT_NE(reply.find('\n'), std::string::npos) << "cut off after " << reply.size() << " bytes";
  EXPECT_GT(seconds, 0.2) << "the read took longer than the read deadline";
  const Json j = Json::parse(reply);
  EXPECT_EQ(j["result"]["count"], k_winners);
}

// Cached lookups are answered by the reader with one non-blocking send per read (issue 10); a
// client that pipelines thousands of them and reads nothing for a while fills the socket, so
// part of a send is left over and goes through the writer. Every reply still arrives, whole and
// in request order, once the client reads.
TEST(LimitsEndToEndTest, PipelinedCachedLookupsArriveInOrderWhenTheSocketFills) {
  TempDir dir;
  const std::string socket = dir / "ktuned.sock";
  DaemonProcess d(socket, dir / "data", {});
  ASSERT_TRUE(d.start());
  const int fd = testing::unix_connect(socket);
  ASSERT_GE(fd, 0);
  const auto line = [](int id) {
    return R"({"v":1,"id":)" + std::to_string(id) +
           R"(,"op":"lookup","device":"nvidia-h200.sm90.132sm.140gib","problem":{"op":"gemm",)"
           R"("dtype":"bf16",)"
           R"("layout":"rc","dims":{"M":512,"N":4096,"K":4096}}})"
           "\n";
  };
  std::string in;
  char buf[65536];
  // Reads until `in` holds a whole line; false at EOF or error.
  const auto read_line = [&] {
    for (ssize_t n; in.find('\n') == std::string::npos;) {
      if ((n = ::recv(fd, buf, sizeof buf, 0)) <= 0) return false;
      in.append(buf, size_t(n));
    }
    return true;
  };
  // The first lookup builds the answer; the same text again is a cached hit.
  const std::string first = line(0);
  ASSERT_EQ(::send(fd, first.data(), first.size(), MSG_NOSIGNAL), ssize_t(first.size()));
  ASSERT_TRUE(read_line());
  ASSERT_NE(in.find(R"("ok":true)"), std::string::npos) << in;
  in.erase(0, in.find('\n') + 1);

  // Send without reading until the daemon stops taking lines: it pauses a connection only while
  // replies wait unsent, so by then a send left bytes over for the writer.
  constexpr int k_lines = 20000;
  std::string out;
  for (int id = 1; id <= k_lines; ++id) out += line(id);
  size_t sent = 0;
  bool blocked = false;
  while (sent < out.size()) {
    const ssize_t n = ::send(fd, out.data() + sent, out.size() - sent, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      blocked = true;
      break;
    }
    ASSERT_GT(n, 0) << std::strerror(errno);
    sent += size_t(n);
  }
  ASSERT_TRUE(blocked) << "the daemon took " << k_lines << " lines without pausing";
  // Now read every reply, sending the rest as the daemon takes it.
  for (int id = 1; id <= k_lines; ++id) {
    while (sent < out.size() && in.find('\n') == std::string::npos) {
      pollfd p{fd, POLLIN | POLLOUT, 0};
      ASSERT_EQ(::poll(&p, 1, 30'000), 1) << "no progress at reply " << id;
      if (p.revents & POLLOUT) {
        const ssize_t n =
            ::send(fd, out.data() + sent, out.size() - sent, MSG_DONTWAIT | MSG_NOSIGNAL);
        if (n > 0) sent += size_t(n);
      }
      if (p.revents & POLLIN) {
        const ssize_t n = ::recv(fd, buf, sizeof buf, MSG_DONTWAIT);
        ASSERT_NE(n, 0) << "closed by the daemon at reply " << id;
        if (n > 0) in.append(buf, size_t(n));
      }
    }
    ASSERT_TRUE(read_line()) << "closed by the daemon at reply " << id;
    const size_t nl = in.find('\n');
    const Json reply = Json::parse(in.substr(0, nl));
    in.erase(0, nl + 1);
    ASSERT_EQ(reply["id"], id);
    ASSERT_EQ(reply["ok"], true) << reply.dump();
  }
  ::close(fd);
}

// CPU seconds (user + system) a process has used.
double cpu_seconds(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(in)), {});
  std::istringstream fields(text.substr(text.rfind(')') + 2));  // after "pid (comm) "
  std::string f;
  long ticks = 0;
  for (int i = 3; i <= 15 && fields >> f; ++i)
    if (i == 14 || i == 15) ticks += std::stol(f);
  return double(ticks) / double(::sysconf(_SC_CLK_TCK));
}

// Out of file descriptors before its connection cap (an open-file limit of 64, which it cannot
// raise): the daemon says so at start and when accept fails, pauses between failed accepts
// instead of spinning a core, and serves again once descriptors are free.
TEST(LimitsEndToEndTest, OutOfDescriptorsTheDaemonWaitsInsteadOfSpinning) {
  TempDir dir;
  DaemonProcess daemon(dir / "k.sock", dir / "data");
  daemon.set_fd_limit(64);
  ASSERT_TRUE(daemon.start()) << "log: " << daemon.log_path();
  std::vector<int> clients;
  for (int i = 0; i < 100; ++i) {
    const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0);
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    std::strncpy(a.sun_path, daemon.socket().c_str(), sizeof a.sun_path - 1);
    if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
      ::close(fd);
      break;  // the backlog is full too
    }
    clients.push_back(fd);
  }
  ASSERT_GT(clients.size(), 64u);
  auto log_has = [&](const std::string& what) {
    std::ifstream in(daemon.log_path());
    return std::string((std::istreambuf_iterator<char>(in)), {}).find(what) != std::string::npos;
  };
  ASSERT_TRUE(testing::eventually([&] { return log_has("accept_failed"); })) << daemon.log_path();
  EXPECT_TRUE(log_has("fd_limit_low"));
  // A second of the daemon's CPU while it cannot accept: a spinning accept loop used all of it.
  const double before = cpu_seconds(daemon.pid());
  std::this_thread::sleep_for(std::chrono::seconds(1));  // the interval measured, not a wait
  EXPECT_LT(cpu_seconds(daemon.pid()) - before, 0.3);
  for (int fd : clients) ::close(fd);
  ClientOptions o;
  o.socket_path = daemon.socket();
  o.timeout = std::chrono::milliseconds(500);
  // The backlog of closed connections drains first: under ASan beside a -j2 suite that took over
  // 10 s once (CI, 2026-12-07), so the deadline is 30 s.
  EXPECT_TRUE(
      testing::eventually([&] { return bool(Client(o).status()); }, std::chrono::seconds(30)));
}

}  // namespace
}  // namespace ktune
