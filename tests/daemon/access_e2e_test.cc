// Access end to end (docs/reliability.md § Access): a real ktuned, raw TCP and Unix sockets, and
// the ktune CLI run as other users. Label "e2e".
#include <grp.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <sstream>

#include "client/client.h"
#include "store/table_io.h"
#include "tests/fakes/daemon_probe.h"
#include "tests/fakes/daemon_process.h"
#include "tests/fakes/test_records.h"

namespace ktune {
namespace {

using protocol::Json;
using testing::DaemonProcess;
using testing::loopback_connect;
using testing::read_to_eof;
using testing::TempDir;

using testing::read_file;

std::string one_winner_table() {
  return render_table({testing::winner(testing::gemm_problem(64, 64, 64), 5.0)}, TableFormat::json);
}

class AccessEndToEndTest : public ::testing::Test {
 protected:
  std::unique_ptr<DaemonProcess> daemon(std::vector<std::string> sets) {
    std::vector<std::string> args;
    for (auto& s : sets) args.insert(args.end(), {"--set", std::move(s)});
    return std::make_unique<DaemonProcess>(m_dir / "ktuned.sock", m_dir / "data", args);
  }
  Json status() {
    ClientOptions o;
    o.socket_path = m_dir / "ktuned.sock";
    o.timeout = std::chrono::seconds(10);
    auto s = Client(o).status();
    EXPECT_TRUE(s) << s.error().message;
    return s ? *s : Json();
  }

  TempDir m_dir;
};

// A TCP listener without a token does not start, on loopback too, and says what to set.
TEST_F(AccessEndToEndTest, TcpWithoutTokenRefusesToStart) {
  auto d = daemon({"server.tcp=127.0.0.1:0"});
  EXPECT_FALSE(d->start());
  EXPECT_EQ(d->wait_exit(), 1);
  const std::string log = read_file(d->log_path());
  EXPECT_NE(log.find("server.tcp_token is empty"), std::string::npos) << log;
  EXPECT_NE(log.find("openssl rand -hex 32"), std::string::npos) << log;
}

// What a browser page can send to a loopback port: an HTTP POST whose body is a valid import
// line (token included). The daemon answers 400, closes, imports nothing and counts it.
TEST_F(AccessEndToEndTest, HttpOnTheProtocolPortIsRefusedAndClosed) {
  auto d =
      daemon({"server.tcp=127.0.0.1:0", "server.tcp_token=s3cret", "server.tcp_admin_token=adm1n"});
  ASSERT_TRUE(d->start()) << read_file(d->log_path());
  const std::string tcp = testing::ready_field(d->log_path(), "tcp"),
                    metrics = testing::ready_field(d->log_path(), "metrics");
  ASSERT_FALSE(tcp.empty());
  const std::string body =
      Json{{"v", 1}, {"id", 1}, {"op", "import"}, {"token", "adm1n"}, {"table", one_winner_table()}}
          .dump() +
      "\n";
  for (const std::string head : {"POST / HTTP/1.1\r\nHost: 127.0.0.1\r\n", "OPTIONS * HTTP/1.1\r\n",
                                 "GET /?q=1 HTTP/1.0\r\n"}) {
    const int fd = loopback_connect(tcp);
    ASSERT_GE(fd, 0);
    const std::string request =
        head + "Content-Type: text/plain\r\nContent-Length: " + std::to_string(body.size()) +
        "\r\n\r\n" + body;
    (void)!::send(fd, request.data(), request.size(), MSG_NOSIGNAL);
    const std::string reply = read_to_eof(fd);  // returns: the daemon closed the connection
    ::close(fd);
    EXPECT_TRUE(reply.starts_with("HTTP/1.1 400 Bad Request\r\n")) << reply;
    EXPECT_EQ(reply.find("\"ok\""), std::string::npos) << "no JSON reply: " << reply;
  }
  EXPECT_EQ(status()["winners"], 0) << "the body was never run";
  EXPECT_EQ(testing::prometheus_counter(testing::http_get(metrics, "/metrics"),
                                        "ktune_http_refused_total"),
            3);
  // The same line as a protocol client sends it is served (the admin token imports).
  const int fd = loopback_connect(tcp);
  ASSERT_GE(fd, 0);
  (void)!::send(fd, body.data(), body.size(), MSG_NOSIGNAL);
  ::shutdown(fd, SHUT_WR);
  const Json reply = Json::parse(read_to_eof(fd));
  ::close(fd);
  EXPECT_TRUE(reply["ok"].get<bool>()) << reply.dump();
  EXPECT_EQ(status()["winners"], 1);
}

// The read token runs read ops over TCP; admin ops need the admin token (C++ client).
TEST_F(AccessEndToEndTest, TcpReadTokenIsReadOnly) {
  auto d = daemon({"server.tcp=127.0.0.1:0", "server.tcp_token=s3cret"});
  ASSERT_TRUE(d->start()) << read_file(d->log_path());
  ClientOptions o;
  o.tcp_address = testing::ready_field(d->log_path(), "tcp");
  o.token = "s3cret";
  Client reader(o);
  ASSERT_TRUE(reader.status());
  auto imported = reader.import_table(one_winner_table());
  ASSERT_FALSE(imported);
  EXPECT_EQ(imported.error().kind, protocol::ErrorKind::forbidden) << imported.error().message;
  o.token = "wrong";
  auto refused = Client(o).status();
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().kind, protocol::ErrorKind::unauthorized);
  EXPECT_EQ(status()["winners"], 0);
}

// Runs the ktune CLI as uid/gid with supplementary `groups`; returns (exit code, output).
std::pair<int, std::string> run_cli_as(uid_t uid, gid_t gid, std::vector<gid_t> groups,
                                       std::vector<std::string> args) {
  int out[2];
  if (::pipe(out) != 0) return {-1, "pipe"};
  args.insert(args.begin(), testing::ktune_cli_path());
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::dup2(out[1], STDOUT_FILENO);
    ::dup2(out[1], STDERR_FILENO);
    ::close(out[0]);
    if (::setgroups(groups.size(), groups.data()) != 0 || ::setgid(gid) != 0 || ::setuid(uid) != 0)
      ::_exit(99);
    ::execv(argv[0], argv.data());
    ::_exit(98);
  }
  ::close(out[1]);
  std::string text;
  char buf[4096];
  ssize_t n;
  while ((n = ::read(out[0], buf, sizeof buf)) > 0) text.append(buf, size_t(n));
  ::close(out[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, text};
}

// Over the real Unix socket: a member of the daemon's group (supplementary) runs read ops and is
// refused admin ops with the group to join; a member of server.admin_group imports; a user in
// neither cannot connect. Needs root (to become other users); CI runs as root.
TEST_F(AccessEndToEndTest, UnixGroupsGrantReadOrAdmin) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to run the CLI as other users";
  const gid_t daemon_gid = ::getgid();  // ktuned runs as this process: root, group 0
  const gid_t admin_gid = 46101;        // no need to exist in /etc/group
  ASSERT_EQ(::chmod(m_dir.path().c_str(), 0755), 0);
  auto d = daemon({"server.admin_group=" + std::to_string(admin_gid)});
  ASSERT_TRUE(d->start()) << read_file(d->log_path());
  const std::string table = m_dir / "t.json";
  ASSERT_TRUE(write_file_atomic(table, one_winner_table()));
  ASSERT_EQ(::chmod(table.c_str(), 0644), 0);
  const std::string sock = m_dir / "ktuned.sock";

  auto [rc, out] = run_cli_as(46001, 46001, {daemon_gid}, {"--socket", sock, "status"});
  EXPECT_EQ(rc, 0) << out;
  std::tie(rc, out) = run_cli_as(46001, 46001, {daemon_gid}, {"--socket", sock, "import", table});
  EXPECT_EQ(rc, 7) << out;  // denied (docs/cli.md, exit codes)
  EXPECT_NE(out.find("forbidden: 'import' is an admin op"), std::string::npos) << out;
  EXPECT_NE(out.find("members of group '46101' (server.admin_group)"), std::string::npos) << out;
  EXPECT_EQ(status()["winners"], 0);

  std::tie(rc, out) =
      run_cli_as(46002, 46002, {daemon_gid, admin_gid}, {"--socket", sock, "import", table});
  EXPECT_EQ(rc, 0) << out;
  EXPECT_EQ(status()["winners"], 1);

  std::tie(rc, out) = run_cli_as(46003, 46003, {}, {"--socket", sock, "status"});
  EXPECT_EQ(rc, 3) << out;
  EXPECT_NE(out.find("Permission denied"), std::string::npos) << out;
}

}  // namespace
}  // namespace ktune
