// A real Session over a socketpair, behind a handler that holds every request until the test
// answers it: drain(), what the daemon does to every connection on SIGTERM (requests already
// running are answered, requests read but not run get one `unavailable` notice, and the
// connection closes, at the deadline at the latest), and the read deadline's notice.
// (The framing as a whole is checked against a model by tests/fuzz/fuzz_frame.cc.)
#include <poll.h>

#include <boost/asio.hpp>
#include <future>
#include <mutex>
#include <optional>
#include <thread>

#include <gtest/gtest.h>
#include "client/protocol.h"
#include "daemon/session.h"
#include "tests/fakes/eventually.h"

namespace ktune {
namespace {

namespace asio = boost::asio;
using Socket = UnixSessionSocket;
using namespace std::chrono_literals;

// Holds every request: the test answers them through emit(), from its own thread, as the
// executor's threads do in the daemon.
class HeldHandler final : public RequestHandler {
 public:
  bool append_fast(std::string_view, const Peer&, std::string&) override { return false; }
  void handle(std::string_view line, std::string attachment, const Peer&, Emit emit,
              const Executor::Lane*) override {
    std::lock_guard lock(m_mutex);
    m_lines.emplace_back(line);
    m_attachments.push_back(std::move(attachment));
    m_emits.push_back(std::move(emit));
  }
  size_t max_attachment_bytes() const override { return 1024; }

  size_t held() const {
    std::lock_guard lock(m_mutex);
    return m_emits.size();
  }
  std::vector<std::string> lines() const {
    std::lock_guard lock(m_mutex);
    return m_lines;
  }
  std::vector<std::string> attachments() const {
    std::lock_guard lock(m_mutex);
    return m_attachments;
  }
  // Answers request `i` with `text`; false when the session no longer takes replies.
  bool answer(size_t i, const std::string& text) {
    Emit emit;
    {
      std::lock_guard lock(m_mutex);
      emit = m_emits.at(i);
    }
    return emit(text, true);
  }

 private:
  mutable std::mutex m_mutex;
  std::vector<std::string> m_lines;
  std::vector<std::string> m_attachments;
  std::vector<Emit> m_emits;
};

class SessionTest : public ::testing::Test {
 protected:
  // Starts the session and the thread that runs it.
  void open(SessionLimits limits = {}) {
    Socket daemon_side(m_io);
    asio::local::connect_pair(daemon_side, m_client);
    auto session = std::make_shared<Session<Socket>>(std::move(daemon_side), m_handler, m_metrics,
                                                     Peer{}, limits);
    m_session = session;
    session->start();
    m_thread = std::thread([this] { m_io.run(); });
  }
  void TearDown() override {
    boost::system::error_code ec;
    m_client.close(ec);
    if (auto s = m_session.lock()) s->close();
    m_work.reset();  // run() returns once the session's handlers are done
    if (m_thread.joinable()) m_thread.join();
  }

  void send(std::string_view bytes) { asio::write(m_client, asio::buffer(bytes)); }
  // Calls drain() and returns once the session's thread has handled it (its post runs first).
  void drain(std::chrono::steady_clock::duration within) {
    m_session.lock()->drain(std::chrono::steady_clock::now() + within);
    std::promise<void> handled;
    asio::post(m_io, [&handled] { handled.set_value(); });
    handled.get_future().wait();
  }
  // What the client reads until the daemon closes; "<no EOF>" appended after 10 s without it.
  std::string read_to_eof() {
    std::string out;
    const auto give_up = std::chrono::steady_clock::now() + 10s;
    for (;;) {
      pollfd p{m_client.native_handle(), POLLIN, 0};
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          give_up - std::chrono::steady_clock::now());
      if (left.count() <= 0 || ::poll(&p, 1, int(left.count())) <= 0) return out + "<no EOF>";
      char buf[4096];
      boost::system::error_code ec;
      const size_t n = m_client.read_some(asio::buffer(buf), ec);
      out.append(buf, n);
      if (ec) return out;
    }
  }

  asio::io_context m_io{1};
  // Keeps run() going until TearDown: a session that closes at once (drain with nothing owed)
  // could leave it without work, and a post after that (drain()'s own) would never run.
  std::optional<asio::executor_work_guard<asio::io_context::executor_type>> m_work{
      m_io.get_executor()};
  Socket m_client{m_io};
  HeldHandler m_handler;
  Metrics m_metrics;
  std::weak_ptr<Session<Socket>> m_session;
  std::thread m_thread;
};

const std::string k_notice = protocol::reply_error(
    nullptr, protocol::ErrorKind::unavailable,
    "ktuned is stopping: this request and any sent after it on this connection were not run; "
    "closing the connection");

// Six pipelined requests: four run (the session's k_max_running), two wait. On drain the four
// still get their replies, in order, then one notice stands for the two that never ran.
TEST_F(SessionTest, DrainAnswersRunningRequestsAndGivesTheRestOneNotice) {
  open();
  static_assert(Session<Socket>::k_max_running == 4);
  send("a\nb\nc\nd\ne\nf\n");
  ASSERT_TRUE(testing::eventually([&] { return m_handler.held() == 4; }));
  drain(10s);
  for (size_t i = 0; i < 4; ++i)
    ASSERT_TRUE(m_handler.answer(i, std::string(1, char('A' + i)) + "\n"));
  EXPECT_EQ(read_to_eof(), "A\nB\nC\nD\n" + k_notice);
  EXPECT_EQ(m_handler.lines(), (std::vector<std::string>{"a", "b", "c", "d"}));
  EXPECT_EQ(m_metrics.errors(), 1u);
  EXPECT_TRUE(testing::eventually([&] { return m_session.expired(); }));
}

// Requests the client sends after the drain are never read, and a drained connection with nothing
// owed closes at once, without a notice.
TEST_F(SessionTest, DrainClosesAnIdleConnectionAtOnceAndRunsNoLaterRequest) {
  open();
  send("a\n");
  ASSERT_TRUE(testing::eventually([&] { return m_handler.held() == 1; }));
  ASSERT_TRUE(m_handler.answer(0, "A\n"));
  drain(1h);
  boost::system::error_code ec;
  asio::write(m_client, asio::buffer(std::string("b\n")), ec);  // may fail: the daemon may close
  EXPECT_EQ(read_to_eof(), "A\n");
  EXPECT_EQ(m_handler.lines(), std::vector<std::string>{"a"});
  EXPECT_TRUE(testing::eventually([&] { return m_session.expired(); }));
}

// A request that outlives the deadline (a watch whose job never ends) does not hold the daemon:
// the connection closes at the deadline, and the late reply goes nowhere.
TEST_F(SessionTest, DrainClosesAtTheDeadlineWhatIsStillOwed) {
  open();
  send("a\nb\n");
  ASSERT_TRUE(testing::eventually([&] { return m_handler.held() == 2; }));
  ASSERT_TRUE(m_handler.answer(0, "A\n"));
  const auto start = std::chrono::steady_clock::now();
  drain(200ms);
  EXPECT_EQ(read_to_eof(), "A\n");
  EXPECT_GE(std::chrono::steady_clock::now() - start, 150ms) << "closed before the deadline";
  EXPECT_TRUE(testing::eventually([&] { return !m_handler.answer(1, "B\n"); }));
}

// A request line whose attachment stops arriving: at the read deadline the client is told why
// the connection closes, as for an incomplete line, and the request is not run.
TEST_F(SessionTest, AnIncompleteAttachmentGetsTheReadDeadlinesNotice) {
  SessionLimits limits;
  limits.read_timeout = 200ms;
  open(limits);
  send("{\"op\":\"import\",\"attach\":10}\nabc");
  EXPECT_EQ(read_to_eof(), protocol::reply_error(nullptr, protocol::ErrorKind::timeout,
                                                 "no complete request within 200 ms; closing "
                                                 "the connection"));
  EXPECT_TRUE(m_handler.lines().empty());
  EXPECT_EQ(m_metrics.errors(), 1u);
}

// "attach" spelled with a JSON escape is the same key: the bytes after the line are its
// attachment, and the next request is read where it starts (they were read as a line of their own).
TEST_F(SessionTest, AnEscapedAttachKeyStillAnnouncesTheAttachment) {
  open();
  const std::string import = R"({"op":"import","att\u0061ch":4})";
  send(import + "\na\nb\n" + "c\n");
  ASSERT_TRUE(testing::eventually([&] { return m_handler.held() == 2; }));
  EXPECT_EQ(m_handler.lines(), (std::vector<std::string>{import, "c"}));
  EXPECT_EQ(m_handler.attachments(), (std::vector<std::string>{"a\nb\n", ""}));
}

// Over TCP, input the daemon never read would make its close a reset, and a reset discards the
// replies still in the kernel's send buffer: a drained connection ends with FIN and drops the
// client's further bytes until the client closes, so an 8 MiB reply read slowly arrives whole.
TEST(SessionTcpTest, DrainDeliversTheWholeReplyThoughTheClientSentMore) {
  asio::io_context io{1};
  asio::ip::tcp::acceptor acceptor(io, {asio::ip::make_address("127.0.0.1"), 0});
  asio::ip::tcp::socket client(io);
  client.connect(acceptor.local_endpoint());
  TcpSessionSocket daemon_side(io);
  acceptor.accept(daemon_side);
  HeldHandler handler;
  Metrics metrics;
  auto session = std::make_shared<Session<TcpSessionSocket>>(std::move(daemon_side), handler,
                                                             metrics, Peer{}, SessionLimits{});
  session->start();
  std::thread thread([&io] { io.run(); });
  asio::write(client, asio::buffer(std::string("a\n")));
  ASSERT_TRUE(testing::eventually([&] { return handler.held() == 1; }));
  session->drain(std::chrono::steady_clock::now() + 20s);
  std::promise<void> drained;
  asio::post(io, [&drained] { drained.set_value(); });
  drained.get_future().wait();
  asio::write(client, asio::buffer(std::string(64 * 1024, 'x')));  // never read by the daemon
  const std::string reply = std::string(8 << 20, 'r') + "\n";
  ASSERT_TRUE(handler.answer(0, reply));
  std::string got;
  boost::system::error_code ec;
  char buf[65536];
  while (!ec) {
    const size_t n = client.read_some(asio::buffer(buf), ec);
    got.append(buf, n);
  }
  EXPECT_EQ(ec, asio::error::eof) << ec.message();
  EXPECT_EQ(got.size(), reply.size());
  EXPECT_TRUE(got == reply) << "8 MiB not printed";
  client.close(ec);
  session.reset();
  thread.join();
}

}  // namespace
}  // namespace ktune
