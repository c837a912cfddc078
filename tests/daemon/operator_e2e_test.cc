// An operator's view of ktuned (docs/operations.md), against a real daemon: the metrics port
// (strict exposition format, 405, /readyz apart from /livez), a second daemon that fails before
// it touches anything, SIGHUP, log levels, config discovery. Label "e2e".
#include <grp.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <thread>

#include "client/client.h"
#include "daemon/daemon.h"
#include "store/table_io.h"
#include "tests/fakes/daemon_probe.h"
#include "tests/fakes/daemon_process.h"
#include "tests/fakes/exposition_check.h"
#include "tests/fakes/test_records.h"

namespace ktune {
namespace {

namespace fs = std::filesystem;
using protocol::Json;
using testing::check_exposition;
using testing::DaemonProcess;
using testing::http_get;
using testing::ready_field;
using testing::TempDir;

using testing::read_file;

void write_file(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  std::ofstream(tmp) << text;
  fs::rename(tmp, path);  // whole or not at all, as an operator's deploy would
}

// Waits (5 s at most) until the file at `path` contains `needle`: the event a test waits on.
bool wait_for_text(const std::string& path, const std::string& needle) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (std::chrono::steady_clock::now() < deadline) {
    if (read_file(path).find(needle) != std::string::npos) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

std::string table_of(std::initializer_list<std::int64_t> sizes) {
  std::vector<WinnerRecord> records;
  for (auto m : sizes) records.push_back(testing::winner(testing::gemm_problem(m, m, m), 5.0));
  return render_table(records, TableFormat::json);
}

class OperatorTest : public ::testing::Test {
 protected:
  std::unique_ptr<DaemonProcess> daemon(std::vector<std::string> sets,
                                        const std::string& name = "a") {
    std::vector<std::string> args;
    for (auto& s : sets) args.insert(args.end(), {"--set", std::move(s)});
    return std::make_unique<DaemonProcess>(m_dir / (name + ".sock"), m_dir / (name + "-data"),
                                           args);
  }
  Json call(const std::string& socket, const std::string& op) {
    ClientOptions o;
    o.socket_path = socket;
    o.timeout = std::chrono::seconds(10);
    auto r = Client(o).call(op);
    return r ? *r : Json{{"error", r.error().message}};
  }

  TempDir m_dir;
};

// ---- the exposition check itself: it must reject what the issue found ----

TEST(ExpositionCheckTest, RejectsAGaugeNamedLikeACounterSample) {
  const auto e = check_exposition(
      "# TYPE k_connections gauge\nk_connections 1\n"
      "# TYPE k_connections_total counter\nk_connections_total 3\n");
  ASSERT_FALSE(e.problems.empty());
  EXPECT_NE(e.problems[0].find("collides"), std::string::npos) << e.problems[0];
}

TEST(ExpositionCheckTest, RejectsDuplicatesMisnamedSamplesAndLateHeaders) {
  EXPECT_FALSE(check_exposition("# TYPE a gauge\na 1\n# TYPE a gauge\na 2\n").problems.empty());
  EXPECT_FALSE(check_exposition("# TYPE a gauge\na 1\na 1\n").problems.empty());
  EXPECT_FALSE(check_exposition("# TYPE c counter\nc 1\n").problems.empty());  // not c_total
  EXPECT_FALSE(check_exposition("a 1\n").problems.empty());                    // no TYPE
  EXPECT_FALSE(check_exposition("# TYPE a gauge\na 1\n# HELP a late\n").problems.empty());
  EXPECT_FALSE(check_exposition("# TYPE a gauge\na{x=\"1\",} 1\n").problems.empty());
  EXPECT_FALSE(
      check_exposition("# TYPE h histogram\nh_bucket{le=\"1\"} 2\nh_bucket{le=\"+Inf\"} 1\n"
                       "h_sum 1\nh_count 1\n")
          .problems.empty());
  EXPECT_TRUE(check_exposition("# HELP c_total Things.\n# TYPE c_total counter\nc_total 1\n"
                               "# TYPE h histogram\nh_bucket{le=\"1\"} 1\nh_bucket{le=\"+Inf\"} 2\n"
                               "h_sum 3\nh_count 2\n")
                  .problems.empty());
}

// ---- the metrics port ----

TEST_F(OperatorTest, MetricsPassTheStrictExpositionCheck) {
  const std::string table = m_dir / "seed.json";
  write_file(table, table_of({64}));
  auto d = daemon({"store.seed_tables=" + table});
  ASSERT_TRUE(d->start());
  call(d->socket(), "status");
  ClientOptions o;
  o.socket_path = d->socket();
  Client c(o);
  auto answer = c.call("lookup", Json{{"device", "nvidia-h200"},
                                      {"problem",
                                       {{"op", "gemm"},
                                        {"dtype", "bf16"},
                                        {"layout", "rc"},
                                        {"dims", {{"M", 64}, {"N", 64}, {"K", 64}}}}}});
  ASSERT_TRUE(answer) << answer.error().message;
  const std::string metrics = ready_field(d->log_path(), "metrics");
  const std::string reply = http_get(metrics, "/metrics");
  ASSERT_NE(reply.find("200 OK"), std::string::npos) << reply;
  const std::string body = reply.substr(reply.find("\r\n\r\n") + 4);
  const auto e = check_exposition(body);
  for (const auto& p : e.problems) ADD_FAILURE() << p;
  EXPECT_EQ(e.types.count("ktune_connections"), 0u);
  EXPECT_EQ(e.types.at("ktune_connections_open"), "gauge");
  EXPECT_EQ(e.types.at("ktune_lookup_seconds"), "histogram");
  bool build_info = false, lookup_count = false;
  for (const auto& s : e.samples) {
    if (s.name == "ktune_build_info") {
      build_info = true;
      EXPECT_EQ(s.value, 1);
      EXPECT_FALSE(s.labels.at("version").empty());
      EXPECT_TRUE(s.labels.count("git"));
    }
    // Series that can never move are gone.
    EXPECT_FALSE(s.name == "ktune_trials_total" && s.labels.at("outcome") == "in_flight");
    EXPECT_FALSE(s.name == "ktune_errors_total" && s.labels.at("code") == "connection_failed");
    if (s.name == "ktune_lookup_seconds_count") {
      lookup_count = true;
      EXPECT_GE(s.value, 1);
    }
  }
  EXPECT_TRUE(build_info);
  EXPECT_TRUE(lookup_count) << "no ktune_lookup_seconds_count series";
}

TEST_F(OperatorTest, OnlyGetIsAnswered) {
  auto d = daemon({});
  ASSERT_TRUE(d->start());
  const std::string metrics = ready_field(d->log_path(), "metrics");
  const int fd = testing::loopback_connect(metrics);
  ASSERT_GE(fd, 0);
  const std::string post = "POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\nhi";
  ASSERT_EQ(::send(fd, post.data(), post.size(), MSG_NOSIGNAL), ssize_t(post.size()));
  const std::string reply = testing::read_to_eof(fd);
  ::close(fd);
  EXPECT_NE(reply.find("HTTP/1.1 405"), std::string::npos) << reply;
  EXPECT_NE(reply.find("Allow: GET"), std::string::npos) << reply;
  EXPECT_NE(http_get(metrics, "/livez").find("200 OK"), std::string::npos);
}

TEST_F(OperatorTest, ReadyzIsNotLivez) {
  fs::create_directories(m_dir / "no-templates");
  auto empty = daemon({"templates.dirs=" + (m_dir / "no-templates")}, "empty");
  ASSERT_TRUE(empty->start());
  const std::string metrics = ready_field(empty->log_path(), "metrics");
  EXPECT_NE(http_get(metrics, "/livez").find("200 OK"), std::string::npos);
  const std::string ready = http_get(metrics, "/readyz");
  EXPECT_NE(ready.find("503"), std::string::npos) << ready;
  EXPECT_NE(ready.find("no templates loaded"), std::string::npos) << ready;

  auto full = daemon({});
  ASSERT_TRUE(full->start());
  EXPECT_NE(http_get(ready_field(full->log_path(), "metrics"), "/readyz").find("200 OK"),
            std::string::npos);
}

// ---- a second daemon ----

TEST_F(OperatorTest, SecondDaemonOnTheMetricsPortFailsBeforeOpeningItsStore) {
  auto first = daemon({});
  ASSERT_TRUE(first->start());
  const std::string port = ready_field(first->log_path(), "metrics");
  auto second = daemon({"server.metrics=" + port}, "b");
  EXPECT_FALSE(second->start());
  EXPECT_EQ(second->wait_exit(), 1);
  const std::string log = read_file(second->log_path());
  EXPECT_NE(log.find("server.metrics " + port), std::string::npos) << log;
  EXPECT_NE(log.find("another ktuned"), std::string::npos) << log;
  EXPECT_FALSE(fs::exists(m_dir / "b-data")) << "the store was opened before the port was taken";
  EXPECT_FALSE(fs::exists(m_dir / "b.sock")) << "the failed daemon left its socket";
  EXPECT_TRUE(call(first->socket(), "status").contains("pid"));
}

TEST_F(OperatorTest, SecondDaemonOnTheSocketFailsBeforeOpeningItsStore) {
  auto first = daemon({});
  ASSERT_TRUE(first->start());
  DaemonProcess second(first->socket(), m_dir / "b-data");
  EXPECT_FALSE(second.start());
  EXPECT_EQ(second.wait_exit(), 1);
  const std::string log = read_file(second.log_path());
  EXPECT_NE(log.find("another ktuned is serving on this socket"), std::string::npos) << log;
  EXPECT_NE(log.find("--socket"), std::string::npos) << log;
  EXPECT_FALSE(fs::exists(m_dir / "b-data"));
  EXPECT_TRUE(call(first->socket(), "status").contains("pid"));
}

// ---- SIGHUP ----

TEST_F(OperatorTest, SighupReopensTheLogAndMergesTheSeedTablesAgain) {
  const std::string table = m_dir / "seed.json";
  write_file(table, table_of({64}));
  const std::string log = m_dir / "ktuned.log";
  auto d = daemon({"store.seed_tables=" + table, "log.file=" + log});
  ASSERT_TRUE(d->start());
  ASSERT_TRUE(wait_for_text(log, " ready "));
  EXPECT_EQ(call(d->socket(), "status")["winners"], 1);

  write_file(table, table_of({64, 128, 256}));
  fs::rename(log, m_dir / "ktuned.log.1");  // logrotate
  ASSERT_EQ(::kill(d->pid(), SIGHUP), 0);
  ASSERT_TRUE(wait_for_text(log, " reloaded ")) << read_file(m_dir / "ktuned.log.1");
  EXPECT_NE(read_file(log).find("winners_added=2"), std::string::npos) << read_file(log);
  EXPECT_EQ(call(d->socket(), "status")["winners"], 3);
  EXPECT_TRUE(fs::exists(d->socket()));
  EXPECT_EQ(d->stop(), 0);
}

// A reload does not apply the configuration file; when the file changed since start it says so,
// and whether the file still loads (if not, the next start fails).
TEST_F(OperatorTest, SighupSaysTheConfigFileChangedAndIsNotApplied) {
  const std::string config = m_dir / "ktuned.yaml";
  write_file(config, "log:\n  level: info\n");
  const std::string log = m_dir / "ktuned.log";
  DaemonProcess d(m_dir / "c.sock", m_dir / "c-data",
                  {"--config", config, "--set", "log.file=" + log});
  ASSERT_TRUE(d.start());
  ASSERT_EQ(::kill(d.pid(), SIGHUP), 0);  // unchanged: nothing to say
  ASSERT_TRUE(wait_for_text(log, " reloaded "));
  EXPECT_EQ(read_file(log).find("config_changed_not_applied"), std::string::npos);

  write_file(config, "log:\n  level: debug\n");
  ASSERT_EQ(::kill(d.pid(), SIGHUP), 0);
  ASSERT_TRUE(wait_for_text(log, "config_changed_not_applied")) << read_file(log);
  EXPECT_NE(read_file(log).find("loads=yes"), std::string::npos) << read_file(log);

  write_file(config, "log:\n  level: debug\n  colour: blue\n");
  ASSERT_EQ(::kill(d.pid(), SIGHUP), 0);
  ASSERT_TRUE(wait_for_text(log, "the next start will fail")) << read_file(log);
  EXPECT_NE(read_file(log).find("log.colour: unknown key"), std::string::npos) << read_file(log);
  EXPECT_TRUE(call(d.socket(), "status").contains("pid"));
  EXPECT_EQ(d.stop(), 0);
}

// How many times `needle` occurs in the file at `path`.
size_t count_text(const std::string& path, const std::string& needle) {
  const std::string text = read_file(path);
  size_t n = 0;
  for (auto at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) ++n;
  return n;
}

// Waits (5 s at most) until the file at `path` holds `needle` `n` times.
bool wait_for_count(const std::string& path, const std::string& needle, size_t n) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (std::chrono::steady_clock::now() < deadline) {
    if (count_text(path, needle) >= n) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

// softmax again, as template `name` of the same op, in the template directory `dir`.
void add_softmax_copy(const std::string& dir, const std::string& name) {
  fs::create_directories(dir + "/" + name);
  fs::copy(dir + "/softmax/softmax.cuh", dir + "/" + name + "/softmax.cuh");
  std::string manifest = read_file(dir + "/softmax/softmax.yaml");
  manifest.replace(manifest.find("name: softmax"), 13, "name: " + name);
  write_file(dir + "/" + name + "/" + name + ".yaml", manifest);
}

TEST_F(OperatorTest, SighupServesChangedTemplatesAndKeepsThemWhenAManifestIsBroken) {
  const std::string dir = m_dir / "templates";
  fs::create_directories(dir);
  fs::copy(std::string(KTUNE_SOURCE_DIR) + "/templates/softmax", dir + "/softmax",
           fs::copy_options::recursive);
  fs::copy(std::string(KTUNE_SOURCE_DIR) + "/templates/common", dir + "/common",
           fs::copy_options::recursive);
  const std::string log = m_dir / "ktuned.log";
  auto d = daemon({"templates.dirs=" + dir, "log.file=" + log});
  ASSERT_TRUE(d->start());
  ClientOptions o;
  o.socket_path = d->socket();
  o.timeout = std::chrono::seconds(10);
  Client client(o);
  const Json lookup_body = {
      {"device", testing::h200().id()},
      {"problem",
       {{"op", "softmax"}, {"dtype", "bf16"}, {"dims", {{"rows", 64}, {"cols", 1024}}}}}};
  // What the daemon offers: template -> hash, from `templates` and from a lookup's heuristics.
  auto listed = [&] {
    std::map<std::string, std::string> out;
    auto r = client.templates();
    EXPECT_TRUE(r) << r.error().message;
    if (r)
      for (const auto& t : (*r)["templates"]) out[t["name"]] = t["hash"];
    return out;
  };
  auto offered = [&] {
    std::map<std::string, std::string> out;
    auto r = client.call("lookup", lookup_body);
    EXPECT_TRUE(r) << r.error().message;
    if (r)
      for (const auto& e : (*r)["entries"]) out[e["template"]] = e["template_hash"];
    return out;
  };
  const auto before = listed();
  ASSERT_EQ(before.size(), 1u);
  EXPECT_EQ(offered(), before);

  // A changed template and a new one: served after the reload, without a restart.
  std::ofstream(dir + "/softmax/softmax.cuh", std::ios::app) << "\n// edited\n";
  add_softmax_copy(dir, "softmax_b");
  ASSERT_EQ(::kill(d->pid(), SIGHUP), 0);
  ASSERT_TRUE(wait_for_count(log, " reloaded ", 1)) << read_file(log);
  EXPECT_NE(read_file(log).find("templates=swapped templates_added=1 templates_changed=1 "
                                "templates_removed=0"),
            std::string::npos)
      << read_file(log);
  const auto after = listed();
  ASSERT_EQ(after.size(), 2u);
  EXPECT_NE(after.at("softmax"), before.at("softmax"));
  EXPECT_EQ(offered(), after) << "the cached answer of the old templates is not served";
  Json status = call(d->socket(), "status");
  EXPECT_EQ(status["templates"], 2);
  EXPECT_EQ(status["reloads"]["ok"], 1);

  // A manifest that does not parse: the error with its file and line, and nothing changes.
  fs::create_directories(dir + "/broken");
  write_file(dir + "/broken/broken.yaml", "name: broken\nop: [unclosed\n");
  std::ofstream(dir + "/softmax_b/softmax.cuh", std::ios::app) << "\n// edited\n";
  ASSERT_EQ(::kill(d->pid(), SIGHUP), 0);
  ASSERT_TRUE(wait_for_count(log, " reloaded ", 2)) << read_file(log);
  const std::string text = read_file(log);
  EXPECT_NE(text.find("reload_templates_failed"), std::string::npos) << text;
  EXPECT_NE(text.find("broken/broken.yaml:"), std::string::npos) << text;
  EXPECT_NE(text.find("templates=kept"), std::string::npos) << text;
  EXPECT_EQ(listed(), after);
  EXPECT_EQ(offered(), after);
  status = call(d->socket(), "status");
  EXPECT_EQ(status["reloads"]["failed"], 1);
  EXPECT_EQ(status["templates"], 2);
  EXPECT_EQ(d->stop(), 0);
}

// ---- log levels ----

TEST_F(OperatorTest, DebugLevelLogsRequestsAndTheirErrors) {
  auto d = daemon({});
  d->set_env({"KTUNE_LOG_LEVEL=debug"});
  ASSERT_TRUE(d->start());
  call(d->socket(), "status");
  call(d->socket(), "no_such_op");
  const std::string log = read_file(d->log_path());
  EXPECT_NE(log.find(" request op=status"), std::string::npos) << log;
  EXPECT_NE(log.find(" request op=no_such_op"), std::string::npos) << log;
  EXPECT_NE(log.find("error=unknown_op"), std::string::npos) << log;
}

TEST_F(OperatorTest, InfoLevelLogsNoRequests) {
  auto d = daemon({"log.level=info"});
  ASSERT_TRUE(d->start());
  call(d->socket(), "status");
  call(d->socket(), "no_such_op");
  EXPECT_EQ(d->stop(), 0);  // every line is written
  const std::string log = read_file(d->log_path());
  EXPECT_NE(log.find(" stopped"), std::string::npos) << log;
  EXPECT_EQ(log.find(" request "), std::string::npos) << log;
}

// ---- the node-wide socket ----

// Sets (or unsets, for nullptr) an environment variable for one scope.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : m_name(name) {
    if (const char* old = std::getenv(name)) m_old = old;
    value ? ::setenv(name, value, 1) : ::unsetenv(name);
  }
  ~ScopedEnv() { m_old ? ::setenv(m_name, m_old->c_str(), 1) : ::unsetenv(m_name); }

 private:
  const char* m_name;
  std::optional<std::string> m_old;
};

TEST_F(OperatorTest, ClientFallsBackToTheNodeWideSocket) {
  auto d = daemon({});
  ASSERT_TRUE(d->start());
  const std::string runtime = m_dir / "runtime";  // no per-user daemon here
  ScopedEnv xdg("XDG_RUNTIME_DIR", runtime.c_str());
  ScopedEnv socket_env("KTUNE_SOCKET", nullptr);
  ClientOptions o;
  o.system_socket_path = d->socket();
  Client c(o);
  auto status = c.status();
  ASSERT_TRUE(status) << status.error().message;
  EXPECT_EQ((*status)["pid"], d->pid());
  EXPECT_EQ(c.endpoint(), d->socket());

  ClientOptions none;
  none.system_socket_path = m_dir / "none.sock";
  auto missing = Client(none).status();
  ASSERT_FALSE(missing);
  EXPECT_NE(missing.error().message.find(runtime + "/ktune/ktuned.sock"), std::string::npos)
      << missing.error().message;
  EXPECT_NE(missing.error().message.find("node-wide " + (m_dir / "none.sock")), std::string::npos)
      << missing.error().message;
}

TEST_F(OperatorTest, CliTriesTheNodeWideSocketToo) {
  const std::string runtime = m_dir / "runtime";  // no per-user daemon here
  const auto [rc, out] = testing::run_command("env -u KTUNE_SOCKET XDG_RUNTIME_DIR=" + runtime +
                                              " " + testing::ktune_cli_path() + " status 2>&1");
  if (rc == 0) GTEST_SKIP() << "a node-wide ktuned answers on this machine";
  EXPECT_NE(out.find(runtime + "/ktune/ktuned.sock"), std::string::npos) << out;
  EXPECT_NE(out.find(std::string("node-wide ") + k_system_socket_path), std::string::npos) << out;
}

TEST_F(OperatorTest, PermissionDeniedSaysWhichSocketWhichGroupAndHowToJoin) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to connect as another user";
  const group* g = ::getgrnam("daemon");
  if (!g) GTEST_SKIP() << "no group 'daemon'";
  // As a node-wide daemon's: /run/ktune is mode 0750, group ktune (here: daemon).
  ::chmod(m_dir.path().c_str(), 0711);
  const std::string run = m_dir / "run";
  fs::create_directories(run);
  ASSERT_EQ(::chown(run.c_str(), 0, g->gr_gid), 0);
  ::chmod(run.c_str(), 0750);
  DaemonProcess d(run + "/ktuned.sock", m_dir / "data", {"--set", "server.metrics=127.0.0.1:0"});
  ASSERT_TRUE(d.start());

  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  const pid_t pid = ::fork();
  if (pid == 0) {  // nobody, in no group
    ::close(fds[0]);
    if (::setgroups(0, nullptr) != 0 || ::setgid(65534) != 0 || ::setuid(65534) != 0) _exit(2);
    ClientOptions o;
    o.socket_path = run + "/ktuned.sock";
    auto s = Client(o).status();
    const std::string message = s ? "connected" : s.error().message;
    (void)!::write(fds[1], message.data(), message.size());
    _exit(0);
  }
  ::close(fds[1]);
  std::string message;
  char buf[512];
  for (ssize_t n; (n = ::read(fds[0], buf, sizeof buf)) > 0;) message.append(buf, size_t(n));
  ::close(fds[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "child status " << status;
  EXPECT_NE(message.find(run + "/ktuned.sock"), std::string::npos) << message;
  EXPECT_NE(message.find("Permission denied"), std::string::npos) << message;
  EXPECT_NE(message.find("group 'daemon'"), std::string::npos) << message;
  EXPECT_NE(message.find("usermod -aG daemon"), std::string::npos) << message;
}

// ---- config discovery ----

TEST(ConfigDiscoveryTest, FlagThenXdgThenEtc) {
  TempDir dir;
  ConfigSearch search{
      .xdg_config_home = dir / "xdg", .home = dir / "home", .system_file = dir / "etc/ktuned.yaml"};
  EXPECT_EQ(find_config_file("", search), "");
  fs::create_directories(dir / "etc");
  std::ofstream(dir / "etc/ktuned.yaml") << "log:\n  level: warn\n";
  EXPECT_EQ(find_config_file("", search), dir / "etc/ktuned.yaml");
  fs::create_directories(dir / "xdg/ktune");
  std::ofstream(dir / "xdg/ktune/ktuned.yaml") << "log:\n  level: debug\n";
  EXPECT_EQ(find_config_file("", search), dir / "xdg/ktune/ktuned.yaml");
  EXPECT_EQ(find_config_file("/given.yaml", search), "/given.yaml");
  // Without XDG_CONFIG_HOME, ~/.config.
  search.xdg_config_home = "";
  EXPECT_EQ(find_config_file("", search), dir / "etc/ktuned.yaml");
  fs::create_directories(dir / "home/.config/ktune");
  std::ofstream(dir / "home/.config/ktune/ktuned.yaml") << "\n";
  EXPECT_EQ(find_config_file("", search), dir / "home/.config/ktune/ktuned.yaml");
}

TEST(ConfigDiscoveryTest, KtunedReadsTheXdgFile) {
  TempDir dir;
  fs::create_directories(dir / "ktune");
  std::ofstream(dir / "ktune/ktuned.yaml") << "tuning:\n  budget_trials: 77\n";
  const auto [rc, out] = testing::run_command("XDG_CONFIG_HOME=" + dir.path() + " " +
                                              testing::ktuned_path() + " --print-config");
  EXPECT_EQ(rc, 0);
  EXPECT_NE(out.find("budget_trials: 77"), std::string::npos) << out;
  const auto [rc2, given] =
      testing::run_command("XDG_CONFIG_HOME=" + dir.path() + " " + testing::ktuned_path() +
                           " --config /dev/null --print-config");
  EXPECT_EQ(rc2, 0);
  EXPECT_EQ(given.find("budget_trials: 77"), std::string::npos) << "--config must win";
}

TEST(VersionTest, KtunedPrintsItsVersion) {
  const auto [rc, out] = testing::run_command(testing::ktuned_path() + " --version");
  EXPECT_EQ(rc, 0);
  EXPECT_EQ(out.rfind("ktuned 0.", 0), 0u) << out;
  EXPECT_NE(out.find('('), std::string::npos) << out;
}

}  // namespace
}  // namespace ktune
