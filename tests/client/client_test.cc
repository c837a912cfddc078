// The C++ client against a scripted fake daemon on a Unix socket: big replies and deadlines.
#include "client/client.h"

#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <functional>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include "tests/fakes/test_records.h"

namespace ktune {
namespace {

using Clock = std::chrono::steady_clock;
using protocol::Json;

// Accepts `connections` connections on `path` one after the other; on each reads one request
// line and runs `answer` on the socket with the connection's index (0, 1, ...).
class FakeDaemon {
 public:
  FakeDaemon(const std::string& path, std::function<void(int fd)> answer)
      : FakeDaemon(path, 1, [answer = std::move(answer)](int fd, int) { answer(fd); }) {}
  FakeDaemon(const std::string& path, int connections, std::function<void(int fd, int n)> answer) {
    m_listener = ::socket(AF_UNIX, SOCK_STREAM, 0);
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    std::strncpy(a.sun_path, path.c_str(), sizeof a.sun_path - 1);
    EXPECT_EQ(::bind(m_listener, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    EXPECT_EQ(::listen(m_listener, 1), 0);
    m_thread = std::thread([this, connections, answer = std::move(answer)] {
      for (int n = 0; n < connections; ++n) {
        const int fd = ::accept(m_listener, nullptr, nullptr);
        if (fd < 0) return;
        char c;
        while (::read(fd, &c, 1) == 1 && c != '\n') {
        }
        answer(fd, n);
        ::close(fd);
      }
    });
  }
  ~FakeDaemon() {
    ::shutdown(m_listener, SHUT_RDWR);
    m_thread.join();
    ::close(m_listener);
  }

 private:
  int m_listener = -1;
  std::thread m_thread;
};

void write_all(int fd, std::string_view data, size_t piece) {
  for (size_t off = 0; off < data.size();) {
    const ssize_t n =
        ::send(fd, data.data() + off, std::min(piece, data.size() - off), MSG_NOSIGNAL);
    if (n <= 0) return;
    off += size_t(n);
  }
}

// Seconds the client takes to get an export reply of `bytes` of content sent in 4 KiB pieces.
double export_reply_seconds(size_t bytes) {
  testing::TempDir dir;
  const std::string content(bytes, 'x');
  const std::string reply =
      Json{{"v", 1},
           {"id", 1},
           {"ok", true},
           {"result", {{"format", "json"}, {"count", 0}, {"content", content}}}}
          .dump() +
      "\n";
  FakeDaemon fake(dir / "s.sock", [&](int fd) { write_all(fd, reply, 4096); });
  ClientOptions o;
  o.socket_path = dir / "s.sock";
  o.timeout = std::chrono::seconds(600);
  Client client(o);
  const auto t0 = Clock::now();
  auto r = client.export_table("json");
  const double s = std::chrono::duration<double>(Clock::now() - t0).count();
  EXPECT_TRUE(r) << r.error().message;
  if (r) {
    EXPECT_EQ((*r)["content"].get_ref<const std::string&>().size(), content.size());
  }
  return s;
}

// A big export reply arriving in small pieces is read in linear time: 8 times the bytes take
// about 8 times as long, not 64 (the client searched the whole buffer for the newline after
// every piece: 50,000 winners took 32 s to export).
// The check every line a daemon reads goes through: "attach" (with its quotes) is found wherever
// it sits (first byte, last byte, between runs of the 'h' the scan looks for), from any start,
// and nowhere else, where a plain substring search finds it; attachment_size reads its count or
// refuses it.
TEST(ProtocolTest, AttachTokenIsFoundWhereverItIsAndOnlyThere) {
  const std::string token = "\"attach\"";
  std::vector<std::string> lines = {"", "h", "\"attach", "attach\"", "\"attac\"", "\"attach \"",
                                    "\"attachh\"", "\"Attach\"", token,
                                    R"({"v":1,"op":"lookup","device":"nvidia-h200"})"};
  for (size_t at = 0; at <= 24; ++at) {
    std::string s(24, 'h');
    s.insert(at, token);
    for (size_t n = 0; n <= s.size(); ++n) lines.push_back(s.substr(0, n));  // every cut
  }
  for (const auto& line : lines)
    for (size_t from = 0; from <= line.size(); ++from)
      EXPECT_EQ(protocol::find_attach_token(line, from), line.find(token, from))
          << line << " from " << from;
  EXPECT_EQ(protocol::attachment_size(R"({"v":1,"op":"lookup","device":"nvidia-h200"})", 100), 0u);
  EXPECT_EQ(protocol::attachment_size(R"({"v":1,"op":"import","attach":42})", 100), 42u);
  EXPECT_FALSE(protocol::attachment_size(R"({"v":1,"op":"import","attach":420})", 100));
  EXPECT_FALSE(protocol::attachment_size(R"({"v":1,"attach": 4, oops)", 100));
  // The key spelled with escapes is the same key: its bytes are an attachment, not lines.
  EXPECT_EQ(protocol::attachment_size(R"({"v":1,"op":"import","att\u0061ch":42})", 100), 42u);
  EXPECT_EQ(protocol::attachment_size(R"({"v":1,"op":"import","\u0061ttach":42})", 100), 42u);
  EXPECT_FALSE(protocol::attachment_size(R"({"v":1,"op":"import","att\u0061ch":420})", 100));
  EXPECT_EQ(protocol::attachment_size(R"({"v":1,"op":"lookup","tag":"a\"b"})", 100), 0u);
  // A line that cannot be parsed may name it with escapes: the stream cannot be trusted.
  EXPECT_FALSE(protocol::attachment_size(R"({"op":"import","att\u0061ch": 1e400})", 100));
  EXPECT_FALSE(protocol::attachment_size(R"({"op":"import","att\u0061ch":4, oops)", 100));
  // A refused count: the error reply echoes the request's id and version (1 for one not spoken).
  protocol::Json id;
  int v = protocol::k_min_version;
  EXPECT_FALSE(
      protocol::attachment_size(R"({"v":2,"id":5,"op":"import","attach":420})", 100, &id, &v));
  EXPECT_EQ(id, 5);
  EXPECT_EQ(v, 2);
  v = protocol::k_min_version;
  EXPECT_FALSE(protocol::attachment_size(R"({"v":9,"op":"import","attach":420})", 100, &id, &v));
  EXPECT_EQ(v, protocol::k_min_version);
}

TEST(ClientTest, BigReplyArrivingInSmallPiecesIsReadInLinearTime) {
#if defined(__SANITIZE_ADDRESS__)
  constexpr size_t k_small = 4 << 20;  // instrumented, the same ratio in fewer seconds
#else
  constexpr size_t k_small = 8 << 20;
#endif
  // The fastest of three reads of each size: another test's load on a shared machine only ever
  // slows a read down, and one slowed 64 MiB read against an unslowed 8 MiB one failed the ratio
  // under ctest -j2 (2026-12-07; 8.3 run alone).
  const auto fastest = [](size_t bytes) {
    double best = export_reply_seconds(bytes);
    for (int i = 0; i < 2; ++i) best = std::min(best, export_reply_seconds(bytes));
    return best;
  };
  const double small = fastest(k_small), big = fastest(8 * k_small);
  std::printf("%zu MiB reply read in %.3f s, %zu MiB in %.3f s (x%.1f)\n", k_small >> 20, small,
              8 * k_small >> 20, big, big / small);
  EXPECT_LT(big, 20 * small);
}

// Timeout 0 is no deadline (the CLI's export and import): a reply that takes longer than a
// deadline would allow still arrives; with a deadline it is a timeout error.
TEST(ClientTest, ZeroTimeoutWaitsForASlowReply) {
  testing::TempDir dir;
  const std::string reply = R"({"v":1,"id":1,"ok":true,"result":{"pid":7}})"
                            "\n";
  for (int timeout_ms : {0, 300}) {
    const std::string path = dir / ("s" + std::to_string(timeout_ms) + ".sock");
    FakeDaemon fake(path, [&](int fd) {
      std::this_thread::sleep_for(std::chrono::milliseconds(800));  // a slow daemon, on purpose
      write_all(fd, reply, reply.size());
    });
    ClientOptions o;
    o.socket_path = path;
    o.timeout = std::chrono::milliseconds(timeout_ms);
    auto r = Client(o).status();
    if (timeout_ms == 0) {
      ASSERT_TRUE(r) << r.error().message;
      EXPECT_EQ((*r)["pid"], 7);
    } else {
      ASSERT_FALSE(r);
      EXPECT_EQ(r.error().kind, protocol::ErrorKind::timeout);
    }
  }
}

// Threads sharing a Client take turns on its connection; the wait for their turn is part of the
// timeout, so a daemon that reads requests and never answers fails all four within about one
// timeout (in turn, as before, 4 x 1 s).
TEST(ClientTest, ThreadsWaitingForTheConnectionTimeOutWithinOneTimeout) {
  testing::TempDir dir;
  std::promise<void> done;
  std::shared_future<void> released = done.get_future().share();
  FakeDaemon fake(dir / "s.sock", [released](int) {
    released.wait_for(std::chrono::seconds(30));  // never answers; gives up after a test timeout
  });
  ClientOptions o;
  o.socket_path = dir / "s.sock";
  o.timeout = std::chrono::seconds(1);
  o.cache_capacity = 0;
  Client client(o);
  std::vector<protocol::Expected<Json>> results(4);
  std::vector<std::thread> threads;
  const auto t0 = Clock::now();
  for (auto& r : results) threads.emplace_back([&] { r = client.status(); });
  for (auto& t : threads) t.join();
  const double s = std::chrono::duration<double>(Clock::now() - t0).count();
  done.set_value();
  for (const auto& r : results) {
    ASSERT_FALSE(r);
    EXPECT_EQ(r.error().kind, protocol::ErrorKind::timeout) << r.error().message;
  }
  EXPECT_LT(s, 3.2);  // one timeout and scheduling; in turn it would be 4 s
}

// A daemon that stopped accepting with its backlog full held a Unix connect() for good (found
// when the test above ran on a loaded machine); the connect is bounded by the call's timeout.
TEST(ClientTest, AConnectToADaemonThatStoppedAcceptingTimesOut) {
  testing::TempDir dir;
  const std::string path = dir / "s.sock";
  const int listener = ::socket(AF_UNIX, SOCK_STREAM, 0);
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  std::strncpy(a.sun_path, path.c_str(), sizeof a.sun_path - 1);
  ASSERT_EQ(::bind(listener, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  ASSERT_EQ(::listen(listener, 0), 0);
  std::vector<int> queued;  // fill the backlog; nobody ever accepts
  for (int i = 0; i < 4; ++i) {
    const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0);
    if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
      ::close(fd);
      break;
    }
    queued.push_back(fd);
  }
  ASSERT_FALSE(queued.empty());
  ClientOptions o;
  o.socket_path = path;
  o.timeout = std::chrono::milliseconds(300);
  o.cache_capacity = 0;
  auto done = std::async(std::launch::async, [&] { return Client(o).status(); });
  ASSERT_EQ(done.wait_for(std::chrono::seconds(30)), std::future_status::ready)
      << "connect() still blocked";
  auto r = done.get();
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().kind, protocol::ErrorKind::timeout) << r.error().message;
  for (int fd : queued) ::close(fd);
  ::close(listener);
}

// Dims the parser reads as floats say which kind of wrong they are.
TEST(ProtocolTest, FloatDimsSayWhetherTheyAreFractionsOrTooLarge) {
  auto whole = protocol::problem_from_json(
      Json::parse(R"({"op":"gemm","dtype":"bf16","dims":{"M":4096.0,"N":1,"K":1}})"));
  ASSERT_FALSE(whole);
  EXPECT_EQ(whole.error().message, "dims.M must be an integer, got 4096.0");
  auto huge = protocol::problem_from_json(
      Json::parse(R"({"op":"gemm","dtype":"bf16","dims":{"M":18446744073709551616,"N":1}})"));
  ASSERT_FALSE(huge);
  EXPECT_NE(huge.error().message.find("is out of range [1, 2^31)"), std::string::npos)
      << huge.error().message;
}

// A daemon closes an idle connection with a notice (a timeout, id null). A request sent on it
// reads that notice (over TCP the send succeeds): the client reconnects and sends again, and the
// caller gets its own reply, not a timeout for a request the daemon never read.
TEST(ClientTest, AnIdleConnectionsCloseNoticeIsNotTheReply) {
  testing::TempDir dir;
  const std::string notice =
      R"({"v":1,"id":null,"ok":false,"error":{"code":"timeout","message":"no complete request"}})"
      "\n";
  const std::string reply = R"({"v":1,"id":1,"ok":true,"result":{"pid":7}})"
                            "\n";
  std::atomic<int> served{0};
  FakeDaemon fake(dir / "s.sock", 2, [&](int fd, int n) {
    ++served;  // before the write: the client may check it as soon as it has the reply
    write_all(fd, n == 0 ? notice : reply, 4096);
  });
  ClientOptions o;
  o.socket_path = dir / "s.sock";
  auto r = Client(o).status();
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ((*r)["pid"], 7);
  EXPECT_EQ(served.load(), 2);
}

// A reply to another request (an id that is not this request's) is never taken for its answer.
TEST(ClientTest, AReplyWithAnotherIdIsRefused) {
  testing::TempDir dir;
  FakeDaemon fake(dir / "s.sock", [&](int fd) {
    write_all(fd,
              R"({"v":1,"id":41,"ok":true,"result":{"pid":7}})"
              "\n",
              4096);
  });
  ClientOptions o;
  o.socket_path = dir / "s.sock";
  auto r = Client(o).status();
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().kind, protocol::ErrorKind::connection_failed) << r.error().message;
}

// A string JSON cannot carry (invalid UTF-8, e.g. from argv) is a bad_request returned before
// anything is sent, not an exception out of the library.
TEST(ClientTest, InvalidUtf8IsABadRequestNotAnException) {
  testing::TempDir dir;
  ClientOptions o;
  o.socket_path = dir / "nobody-listens.sock";
  Client c(o);
  protocol::LookupRequest lookup;
  lookup.problem = {"gem\xffm", "bf16", "", "", {{"M", 1}, {"N", 1}, {"K", 1}}};
  auto r = c.lookup(lookup);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().kind, protocol::ErrorKind::bad_request) << r.error().message;
  EXPECT_NE(r.error().message.find("not valid UTF-8"), std::string::npos);
  auto called = c.call("import", {{"table", "{\"node_id\": \"\xff\"}"}});
  ASSERT_FALSE(called);
  EXPECT_EQ(called.error().kind, protocol::ErrorKind::bad_request) << called.error().message;
}

}  // namespace
}  // namespace ktune
