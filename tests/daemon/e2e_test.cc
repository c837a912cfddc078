// End to end: a real ktuned process on a temporary socket and data directory, driven through the
// C++ client, the ktune CLI and raw sockets. Label "e2e".
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include <fstream>
#include <thread>

#include "client/client.h"
#include "config/config.h"
#include "store/records.h"
#include "store/table_io.h"
#include "templates/registry.h"
#include "templates/space.h"
#include "tests/fakes/daemon_probe.h"
#include "tests/fakes/daemon_process.h"
#include "tests/fakes/eventually.h"
#include "tests/fakes/test_records.h"

namespace ktune {
namespace {

using protocol::Json;
using testing::DaemonProcess;
using testing::run_command;
using testing::TempDir;

// A table of two H200 gemm winners measured with the current gemm template.
std::string write_table(const std::string& path) {
  const auto reg = TemplateRegistry::load({builtin_template_dir()});
  const KernelTemplate* gemm = reg.find("gemm");
  std::vector<WinnerRecord> records;
  for (auto [m, us] : {std::pair{4096, 190.0}, std::pair{16, 22.0}}) {
    auto w = testing::winner(
        Problem{"gemm", "bf16", "bf16", "rc", {{"M", m}, {"N", 4096}, {"K", 4096}}}, us);
    for (auto& c : w.ranked) {
      c.template_hash = gemm->hash;
      c.params = *heuristic_config(*gemm, w.problem, DeviceLimits{});
    }
    w.ranked.resize(1);
    w.validators.nvrtc = "13.0";
    records.push_back(w);
  }
  EXPECT_TRUE(write_file_atomic(path, render_table(records, TableFormat::json)));
  return path;
}

std::string raw_read_line(int fd) {
  std::string out;
  char c;
  while (::recv(fd, &c, 1, 0) == 1) {
    if (c == '\n') return out;
    out += c;
  }
  return out;
}

// Sends `request` to 127.0.0.1:port and returns the whole response.
std::string http_send(int port, const std::string& request) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(std::uint16_t(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) return "connect failed";
  ::send(fd, request.data(), request.size(), MSG_NOSIGNAL);
  std::string out;
  char buf[4096];
  ssize_t n;
  while ((n = ::recv(fd, buf, sizeof buf, 0)) > 0) out.append(buf, size_t(n));
  ::close(fd);
  return out;
}

// The metrics port the daemon's ready log line names (it may follow the first status reply);
// 0 if no such line came.
int metrics_port(const DaemonProcess& daemon) {
  std::string text;
  if (!testing::eventually([&] {
        std::ifstream log(daemon.log_path());
        text.assign(std::istreambuf_iterator<char>(log), {});
        return text.find("metrics=127.0.0.1:") != std::string::npos;
      }))
    return 0;
  const auto pos = text.find("metrics=127.0.0.1:");
  return std::stoi(text.substr(pos + 18, text.find(' ', pos) - pos - 18));
}

// A minimal HTTP/1.0 GET against 127.0.0.1:port; returns the whole response.
std::string http_get(int port, const std::string& path) {
  return http_send(port, "GET " + path + " HTTP/1.0\r\n\r\n");
}

class EndToEndTest : public ::testing::Test {
 protected:
  ClientOptions options() const {
    ClientOptions o;
    o.socket_path = m_dir / "ktuned.sock";
    o.timeout = std::chrono::milliseconds(5000);
    o.cache_capacity = 0;
    return o;
  }
  std::string cli(const std::string& args) {
    auto [rc, out] = run_command(testing::ktune_cli_path() + " --socket " +
                                 (m_dir / "ktuned.sock") + " " + args + " 2>&1");
    m_last_rc = rc;
    return out;
  }

  TempDir m_dir;
  int m_last_rc = 0;
};

std::vector<std::string> provenances(const protocol::LookupReply& r) {
  std::vector<std::string> out;
  for (const auto& e : r.entries) out.push_back(e.provenance);
  return out;
}

TEST_F(EndToEndTest, ImportLookupRestartSameAnswers) {
  const std::string table = write_table(m_dir / "h200.json");
  auto daemon = std::make_unique<DaemonProcess>(m_dir / "ktuned.sock", m_dir / "data");
  ASSERT_TRUE(daemon->start()) << "ktuned did not start; log: " << daemon->log_path();

  // Import through the CLI.
  std::string out = cli("import " + table);
  ASSERT_EQ(m_last_rc, 0) << out;
  EXPECT_NE(out.find("2 added"), std::string::npos) << out;

  Client client(options());
  auto lookup = [&](std::int64_t m) {
    protocol::LookupRequest req;
    req.problem = {"gemm", "bf16", "", "rc", {{"M", m}, {"N", 4096}, {"K", 4096}}};
    req.device = "nvidia-h200";
    return client.lookup(req);
  };
  std::vector<protocol::LookupReply> before;
  for (std::int64_t m : {4096, 8, 333}) {
    auto r = lookup(m);
    ASSERT_TRUE(r) << r.error().message;
    before.push_back(*r);
  }
  EXPECT_EQ(before[0].entries[0].provenance, "exact");
  EXPECT_EQ(before[0].entries[0].median_us, 190.0);
  EXPECT_EQ(before[1].entries[0].provenance, "nearest");
  EXPECT_EQ(before[1].entries[0].from, "gemm|bf16|bf16|rc|M=16,N=4096,K=4096");
  EXPECT_EQ(before[2].entries[0].provenance, "heuristic");

  // The CLI gives the same answers, as JSON with a schema version and as a table.
  Json j =
      Json::parse(cli("--json lookup gemm --dtype bf16 --layout rc --shape M=4096,N=4096,K=4096 "
                      "--device nvidia-h200"));
  EXPECT_EQ(j["schema_version"], protocol::k_cli_schema_version);
  EXPECT_EQ(j["entries"][0]["provenance"], "exact");
  EXPECT_EQ(j["entries"][0]["template"], before[0].entries[0].template_name);
  out = cli("lookup gemm --layout rc --shape M=8,N=4096,K=4096 --device nvidia-h200");
  EXPECT_EQ(m_last_rc, 0);
  EXPECT_NE(out.find("nearest"), std::string::npos) << out;

  // Restart: the store brings everything back.
  EXPECT_EQ(daemon->stop(), 0);
  daemon = std::make_unique<DaemonProcess>(m_dir / "ktuned.sock", m_dir / "data");
  ASSERT_TRUE(daemon->start());
  for (size_t i = 0; i < 3; ++i) {
    auto r = lookup(std::int64_t(std::array{4096, 8, 333}[i]));
    ASSERT_TRUE(r) << r.error().message;
    EXPECT_EQ(provenances(*r), provenances(before[i]));
    EXPECT_EQ(r->entries[0].params, before[i].entries[0].params);
    EXPECT_EQ(r->entries[0].name_expression, before[i].entries[0].name_expression);
  }

  // Export through the CLI and compare with the imported table's records.
  out = cli("export --format json -o " + (m_dir / "out.json"));
  ASSERT_EQ(m_last_rc, 0) << out;
  std::vector<ImportRejection> rejected;
  std::ifstream in1(table), in2(m_dir / "out.json");
  std::stringstream s1, s2;
  s1 << in1.rdbuf();
  s2 << in2.rdbuf();
  auto exported = *parse_table(s2.str(), "out", rejected),
       imported = *parse_table(s1.str(), "in", rejected);
  auto by_key = [](const WinnerRecord& a, const WinnerRecord& b) { return a.key() < b.key(); };
  std::sort(imported.begin(), imported.end(), by_key);
  EXPECT_EQ(exported, imported);
}

TEST_F(EndToEndTest, MalformedRequestsGetErrorsAndTheDaemonKeepsServing) {
  DaemonProcess daemon(m_dir / "ktuned.sock", m_dir / "data");
  ASSERT_TRUE(daemon.start());
  int fd = testing::unix_connect(daemon.socket());
  ASSERT_GE(fd, 0);
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"this is not json", "parse_error"},
      {R"({"v":1,"id":1,"op":"lookup","device":"nvidia-h200.sm90.132sm.140gib","problem":{"op":"gemm","dtype":"bf16","dims":{"M":0,"N":1,"K":1}}})",
       "invalid_problem"},
      {R"({"v":1,"id":1,"op":"lookup","device":"nvidia-h200","problem":{"op":"gemm","dtype":"bf16","dims":{"M":-1,"N":1,"K":1}}})",
       "invalid_problem"},
      {R"({"v":1,"id":1,"op":"lookup","device":"nvidia-h200","problem":{"op":"gemm","dtype":"bf16","dims":{"M":18446744073709551615,"N":1,"K":1}}})",
       "invalid_problem"},
      {R"({"v":1,"id":1,"op":"lookup","problem":{"op":"gemm","dtype":7,"dims":{"M":1,"N":1,"K":1}}})",
       "bad_request"},
      {R"({"v":1,"id":1,"op":"frobnicate"})", "unknown_op"},
      {R"({"v":3,"id":1,"op":"status"})", "unsupported_version"},
  };
  for (const auto& [line, code] : cases) {
    const std::string framed = line + "\n";
    ASSERT_EQ(::send(fd, framed.data(), framed.size(), 0), ssize_t(framed.size()));
    Json reply = Json::parse(raw_read_line(fd));
    EXPECT_FALSE(reply["ok"].get<bool>()) << line;
    EXPECT_EQ(reply["error"]["code"], code) << line;
  }
  // Pipelined: three requests in one write, three replies in order.
  const std::string three = R"({"v":1,"id":"a","op":"status"})"
                            "\n"
                            R"({"v":1,"id":"b","op":"status"})"
                            "\n"
                            R"({"v":1,"id":"c","op":"templates"})"
                            "\n";
  ::send(fd, three.data(), three.size(), 0);
  for (const char* id : {"a", "b", "c"}) EXPECT_EQ(Json::parse(raw_read_line(fd))["id"], id);

  // A frame over 64 KiB: error reply, then the connection is closed.
  const std::string huge =
      R"({"v":1,"id":1,"op":"status","pad":")" + std::string(70 * 1024, 'x') + "\"}\n";
  ::send(fd, huge.data(), huge.size(), MSG_NOSIGNAL);
  Json big = Json::parse(raw_read_line(fd));
  EXPECT_EQ(big["error"]["code"], "frame_too_large");
  char c;
  EXPECT_LE(::recv(fd, &c, 1, 0), 0) << "connection closed after an oversized frame";
  ::close(fd);

  // The daemon still answers new connections.
  Client client(options());
  auto s = client.status();
  ASSERT_TRUE(s) << s.error().message;
  EXPECT_GE((*s)["requests"].get<int>(), int(cases.size()));
}

TEST_F(EndToEndTest, ReadDeadlineAndConnectionCap) {
  DaemonProcess daemon(
      m_dir / "ktuned.sock", m_dir / "data",
      {"--set", "server.read_timeout_ms=300", "--set", "server.max_connections=2"});
  ASSERT_TRUE(daemon.start());
  // A client that connects and sends half a line is told off and closed.
  int slow = testing::unix_connect(daemon.socket());
  ::send(slow, "{\"v\":1", 6, 0);
  Json reply = Json::parse(raw_read_line(slow));
  EXPECT_EQ(reply["error"]["code"], "timeout");
  ::close(slow);
  // With two connections open, a third is refused with a reason. Each of the two is known to
  // count once it has been answered; the slow client's place is free when its session ends,
  // just after the close above, so a connection refused before then is made again.
  auto served = [&](int& fd) {
    if (fd >= 0) ::close(fd);
    fd = testing::unix_connect(daemon.socket());
    const std::string status = std::string(R"({"v":1,"id":1,"op":"status"})") + "\n";
    if (fd < 0 || ::send(fd, status.data(), status.size(), MSG_NOSIGNAL) != ssize_t(status.size()))
      return false;
    const Json r = Json::parse(raw_read_line(fd), nullptr, false);
    return r.is_object() && r.value("ok", false);
  };
  int a = -1, b = -1;
  ASSERT_TRUE(testing::eventually([&] { return served(a); }));
  ASSERT_TRUE(testing::eventually([&] { return served(b); }));
  int third = testing::unix_connect(daemon.socket());
  Json refused = Json::parse(raw_read_line(third));
  EXPECT_EQ(refused["error"]["code"], "too_many_connections");
  ::close(a);
  ::close(b);
  ::close(third);
}

// Bytes that complete no line do not hold the read deadline off: a client trickling half a
// request, one byte well inside every deadline, is still timed out and closed mid-trickle.
TEST_F(EndToEndTest, ReadDeadlineIsNotExtendedByAPartialLine) {
  DaemonProcess daemon(m_dir / "ktuned.sock", m_dir / "data",
                       {"--set", "server.read_timeout_ms=300"});
  ASSERT_TRUE(daemon.start());
  int slow = testing::unix_connect(daemon.socket());
  const std::string half(100, ' ');  // 100 bytes at one per 50 ms: 5 s, far past the deadline
  bool closed_mid_line = false;
  for (char c : "{\"v\":1" + half) {
    if (::send(slow, &c, 1, MSG_NOSIGNAL) != 1) {
      closed_mid_line = true;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_TRUE(closed_mid_line);
  Json reply = Json::parse(raw_read_line(slow));
  EXPECT_EQ(reply["error"]["code"], "timeout");
  ::close(slow);
}

TEST_F(EndToEndTest, StaleSocketFromACrashIsReplacedLiveOneIsNot) {
  auto daemon = std::make_unique<DaemonProcess>(m_dir / "ktuned.sock", m_dir / "data");
  ASSERT_TRUE(daemon->start());
  // A second daemon on the same socket refuses to start.
  DaemonProcess second(m_dir / "ktuned.sock", m_dir / "data2");
  EXPECT_FALSE(second.start());
  EXPECT_EQ(second.wait_exit(), 1);
  std::ifstream second_log(second.log_path());
  EXPECT_NE(
      std::string(std::istreambuf_iterator<char>(second_log), {}).find("another ktuned is serving"),
      std::string::npos);
  daemon->crash();
  EXPECT_TRUE(std::filesystem::exists(m_dir / "ktuned.sock")) << "SIGKILL leaves the socket file";
  daemon = std::make_unique<DaemonProcess>(m_dir / "ktuned.sock", m_dir / "data");
  ASSERT_TRUE(daemon->start()) << "stale socket should be replaced";
  struct stat st {};
  ASSERT_EQ(::stat((m_dir / "ktuned.sock").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0660u);
}

TEST_F(EndToEndTest, CliSaysWhenTheDaemonIsNotRunning) {
  std::string out = cli("status");
  EXPECT_EQ(m_last_rc, 3);
  EXPECT_NE(out.find("is ktuned running?"), std::string::npos) << out;
}

TEST_F(EndToEndTest, BadImportFileIsRejectedWholeThroughTheCli) {
  DaemonProcess daemon(m_dir / "ktuned.sock", m_dir / "data");
  ASSERT_TRUE(daemon.start());
  const std::string table = write_table(m_dir / "t.json");
  std::ifstream in(table);
  std::stringstream ss;
  ss << in.rdbuf();
  std::ofstream(m_dir / "cut.json") << ss.str().substr(0, ss.str().size() / 2);
  std::string out = cli("import " + (m_dir / "cut.json"));
  EXPECT_EQ(m_last_rc, 1);
  EXPECT_NE(out.find("truncated or damaged"), std::string::npos) << out;
  Client client(options());
  EXPECT_EQ((*client.status())["winners"], 0);
}

TEST_F(EndToEndTest, MetricsAndHealthOverHttp) {
  DaemonProcess daemon(m_dir / "ktuned.sock", m_dir / "data");
  ASSERT_TRUE(daemon.start());
  const int metrics = metrics_port(daemon);
  ASSERT_GT(metrics, 0);
  const std::string port = std::to_string(metrics);
  const std::string body = http_get(std::stoi(port), "/metrics");
  EXPECT_NE(body.find("200 OK"), std::string::npos) << body;
  EXPECT_NE(body.find("ktune_requests_total{op=\"lookup\"}"), std::string::npos) << body;
  // The daemon's own process, as every Prometheus client library exports it.
  EXPECT_GT(testing::prometheus_counter(body, "process_resident_memory_bytes"), 1 << 20) << body;
  EXPECT_GT(testing::prometheus_counter(body, "process_open_fds"), 3) << body;
  EXPECT_GT(testing::prometheus_counter(body, "process_start_time_seconds"), 1'700'000'000);
  EXPECT_NE(http_get(std::stoi(port), "/livez").find("\r\n\r\nok"), std::string::npos);
  EXPECT_NE(http_get(std::stoi(port), "/nope").find("404"), std::string::npos);
  // What is not a GET it can answer is told why, not dropped.
  const auto status_line = [&](const std::string& request) {
    const std::string r = http_send(std::stoi(port), request);
    return r.substr(0, r.find("\r\n"));
  };
  EXPECT_EQ(status_line("GARBAGE\r\n\r\n"), "HTTP/1.1 400 Bad Request");
  EXPECT_EQ(status_line("GET /livez HTTP/1.1\r\nX-Big: " + std::string(9000, 'a') + "\r\n\r\n"),
            "HTTP/1.1 431 Request Header Fields Too Large");
  EXPECT_EQ(status_line("POST /metrics HTTP/1.1\r\nContent-Length: 2\r\n\r\n{}"),
            "HTTP/1.1 405 Method Not Allowed");
  // /report is off unless turned on: the metrics port has no access rules, and the page shows
  // the node's winners, jobs and store (it was served to anyone reaching the port).
  const std::string refused = http_get(std::stoi(port), "/report");
  EXPECT_NE(refused.find("403 Forbidden"), std::string::npos) << refused;
  EXPECT_NE(refused.find("server.report: false"), std::string::npos) << refused;
}

// Idle connections fill the metrics port's 64 slots: one past them is closed unanswered and
// counted, and each idle one is closed after 1 s, so /livez answers again (64 idle connections
// renewed every 5 s kept the probes out for good).
TEST_F(EndToEndTest, IdleConnectionsCannotKeepTheProbesOut) {
  DaemonProcess daemon(m_dir / "ktuned.sock", m_dir / "data");
  ASSERT_TRUE(daemon.start());
  const int port = metrics_port(daemon);
  ASSERT_GT(port, 0);
  auto connect_idle = [port] {
    int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(std::uint16_t(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
    return fd;
  };
  // Closed by the daemon within `ms`: a read sees the end of the stream, nothing before it.
  auto closed_within = [](int fd, int ms) {
    pollfd p{fd, POLLIN, 0};
    char c;
    return ::poll(&p, 1, ms) == 1 && ::recv(fd, &c, 1, 0) == 0;
  };
  std::vector<int> idle;
  for (int i = 0; i < 64; ++i) idle.push_back(connect_idle());
  const int extra = connect_idle();
  EXPECT_TRUE(closed_within(extra, 500)) << "the 65th is closed at once, unanswered";
  ::close(extra);
  const auto start = std::chrono::steady_clock::now();
  for (int fd : idle) {
    EXPECT_TRUE(closed_within(fd, 10'000)) << "an idle connection was never closed";
    ::close(fd);
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(4))
      << "idle connections are closed after 1 s (it was 5 s)";
  EXPECT_NE(http_get(port, "/livez").find("\r\n\r\nok"), std::string::npos);
  EXPECT_EQ(
      testing::prometheus_counter(http_get(port, "/metrics"), "ktune_metrics_port_refused_total"),
      1);
}

// Turned on, /report is drawn on the executor and served as HTML.
TEST_F(EndToEndTest, TheReportPageIsServedWhenTurnedOn) {
  DaemonProcess daemon(m_dir / "ktuned.sock", m_dir / "data",
                       std::vector<std::string>{"--set", "server.report=true"});
  ASSERT_TRUE(daemon.start());
  const int port = metrics_port(daemon);
  ASSERT_GT(port, 0);
  const std::string page = http_get(port, "/report");
  EXPECT_NE(page.find("200 OK"), std::string::npos) << page.substr(0, 400);
  EXPECT_NE(page.find("Content-Type: text/html"), std::string::npos) << page.substr(0, 400);
  EXPECT_NE(page.find("tuning report"), std::string::npos);
  EXPECT_NE(page.find("</html>"), std::string::npos);
  EXPECT_NE(http_get(port, "/livez").find("\r\n\r\nok"), std::string::npos);
}

// A number beyond a double or bytes that are not UTF-8 get one error line; the replies pipelined
// before and after it are answered in order, and the connection stays open.
TEST_F(EndToEndTest, BadNumbersAndBytesGetAnErrorAndTheConnectionStaysOpen) {
  DaemonProcess daemon(m_dir / "ktuned.sock", m_dir / "data");
  ASSERT_TRUE(daemon.start());
  int fd = testing::unix_connect(daemon.socket());
  ASSERT_GE(fd, 0);
  const std::string pipelined = std::string(R"({"v":1,"id":"a","op":"status"})") + "\n" +
                                R"({"v":1,"id":"b","op":"status","x":1e400})" + "\n" +
                                "{\"v\":1,\"id\":\"c\",\"op\":\"st\xff\xfe\"}\n" +
                                R"({"v":1,"id":"d","op":"templates"})" + "\n" +
                                "{\"v\":1,\"id\":\"e\",\"attach\":1e400}\n" +
                                R"({"v":1,"id":"f","op":"status"})" + "\n";
  ASSERT_EQ(::send(fd, pipelined.data(), pipelined.size(), 0), ssize_t(pipelined.size()));
  const std::vector<std::pair<std::string, std::string>> expected = {
      {"a", ""}, {"b", "bad_request"}, {"c", "parse_error"}, {"d", ""}};
  for (const auto& [id, code] : expected) {
    Json reply = Json::parse(raw_read_line(fd));
    EXPECT_EQ(reply["id"], id) << reply.dump();
    EXPECT_EQ(reply["ok"].get<bool>(), code.empty()) << reply.dump();
    if (!code.empty()) {
      EXPECT_EQ(reply["error"]["code"], code) << reply.dump();
    }
  }
  // A line that announces an attachment but cannot be read: the stream cannot be resynchronized,
  // so it is answered and the connection closed (docs/protocol.md, Attachments).
  Json attach = Json::parse(raw_read_line(fd));
  EXPECT_EQ(attach["error"]["code"], "bad_request") << attach.dump();
  EXPECT_EQ(attach["id"], "e") << "the id came before the bad number: " << attach.dump();
  char c;
  EXPECT_LE(::recv(fd, &c, 1, 0), 0) << "closed after an unreadable attachment header";
  ::close(fd);
  // A fresh connection is served.
  Client client(options());
  ASSERT_TRUE(client.status());
}

// A seed table with a number out of range or invalid UTF-8 stops the start with the file and
// line, instead of aborting.
TEST_F(EndToEndTest, BadSeedTableIsRefusedWithFileAndLine) {
  const std::string good = write_table(m_dir / "good.json");
  std::ifstream in(good);
  std::string text((std::istreambuf_iterator<char>(in)), {});
  const size_t at = text.find("\"median_us\": ");
  ASSERT_NE(at, std::string::npos);
  const int line = 1 + int(std::count(text.begin(), text.begin() + long(at), '\n'));
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"1e400", "out of range"}, {"\"\xff\"", "UTF-8"}};
  for (const auto& [value, what] : bad) {
    std::string broken = text;
    const size_t end = broken.find_first_of(",\n", at);
    broken.replace(at, end - at, "\"median_us\": " + value);
    const std::string path = m_dir / "bad.json";
    std::ofstream(path, std::ios::binary | std::ios::trunc) << broken;
    DaemonProcess daemon(m_dir / "ktuned.sock", m_dir / "data",
                         {"--set", "store.seed_tables=" + path});
    EXPECT_FALSE(daemon.start());
    EXPECT_EQ(daemon.wait_exit(), 1) << "a clean refusal, not an abort";
    std::ifstream log(daemon.log_path());
    std::string logged((std::istreambuf_iterator<char>(log)), {});
    EXPECT_NE(logged.find(path + ":" + std::to_string(line) + ":"), std::string::npos)
        << value << ": " << logged;
    EXPECT_NE(logged.find(what), std::string::npos) << logged;
    std::filesystem::remove(daemon.log_path());
  }
}

}  // namespace
}  // namespace ktune
