#include "config/config.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <set>

namespace ktune {
namespace {

const std::string k_example = std::string(KTUNE_SOURCE_DIR) + "/config/ktuned.yaml";

TEST(ConfigTest, DefaultsAreUsableWithoutAFile) {
  DaemonConfig c = default_config();
  EXPECT_FALSE(c.socket_path.empty());
  EXPECT_FALSE(c.data_dir.empty());
  ASSERT_EQ(c.template_dirs.size(), 1u);
  EXPECT_TRUE(c.template_dirs[0].ends_with("templates"));
  EXPECT_EQ(c.strategy, "model");
  EXPECT_TRUE(validate_config(c).has_value());
}

TEST(ConfigTest, ExampleFileLoadsCleanly) {
  DaemonConfig c = default_config();
  auto ok = apply_config_file(c, k_example);
  ASSERT_TRUE(ok) << ok.error().message;
  EXPECT_EQ(c.socket_path, "/tmp/ktune-example/ktuned.sock");
  EXPECT_EQ(c.data_dir, "/tmp/ktune-example/state");
  EXPECT_EQ(c.budget_trials, 256);
  EXPECT_TRUE(c.seed_tables.empty());
  EXPECT_TRUE(validate_config(c).has_value());
}

// Every key in the table appears in the example file with its env name, and vice versa.
TEST(ConfigTest, ExampleFileAndKeyTableAgree) {
  std::ifstream in(k_example);
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string text = ss.str();
  std::set<std::string> file_keys;
  std::string section;
  std::regex section_re(R"(^([a-z_0-9]+):\s*$)"), key_re(R"(^  ([a-z_0-9]+):)");
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    std::smatch m;
    if (std::regex_match(line, m, section_re))
      section = m[1];
    else if (std::regex_search(line, m, key_re))
      file_keys.insert(section + "." + std::string(m[1]));
  }
  std::set<std::string> table_keys;
  for (const auto& k : config_keys()) {
    table_keys.insert(std::string(k.name));
    EXPECT_NE(text.find(std::string(k.env)), std::string::npos) << k.env << " not documented";
    EXPECT_FALSE(k.help.empty()) << k.name;
  }
  EXPECT_EQ(file_keys, table_keys);
}

TEST(ConfigTest, UnknownKeyNamesFileLineAndSuggests) {
  DaemonConfig c = default_config();
  auto r = apply_config_yaml(c, "server:\n  socket: /x\n  max_conections: 5\n", "k.yaml");
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().message, "k.yaml:3: server.max_conections: unknown key");
}

TEST(ConfigTest, UnknownKeySuggestsTheRightSection) {
  DaemonConfig c = default_config();
  auto r = apply_config_yaml(c, "tuning:\n  nearest_radius: 3\n", "k.yaml");
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().message,
            "k.yaml:2: tuning.nearest_radius: unknown key (did you mean 'lookup.nearest_radius'?)");
}

// A misspelt override would be ignored in silence: the daemon names it, with the closest one.
TEST(ConfigTest, UnknownEnvironmentVariablesAreNamedWithTheClosestOverride) {
  const std::map<std::string, std::string> env = {
      {"KTUNE_NEAREST_RADUIS", "3"},  // two letters swapped
      {"KTUNE_NEAREST_RADIUS", "2"},  // a key's override
      {"KTUNE_SOCKET", "/tmp/s"},     // the clients'
      {"KTUNE_HOME", "/tmp/h"},      {"KTUNE_LOG_LEVL", "debug"},
      {"KTUNE_SOMETHING_ELSE", "1"},  // nothing near
  };
  EXPECT_EQ(unknown_environment(env),
            (std::vector<std::string>{"KTUNE_LOG_LEVL (did you mean KTUNE_LOG_LEVEL?)",
                                      "KTUNE_NEAREST_RADUIS (did you mean KTUNE_NEAREST_RADIUS?)",
                                      "KTUNE_SOMETHING_ELSE"}));
  std::map<std::string, std::string> every_override;
  for (const auto& key : config_keys()) every_override.emplace(std::string(key.env), "x");
  EXPECT_TRUE(unknown_environment(every_override).empty());
}

// The names unknown_environment() lets pass besides the keys' overrides are exactly the KTUNE_*
// variables some source reads (getenv, os.environ): a new one must be added there, or the daemon
// would warn that it has no effect; one nothing reads any more must go.
TEST(ConfigTest, OtherEnvironmentIsWhatTheSourcesRead) {
  namespace fs = std::filesystem;
  const std::regex read_re(
      R"re((?:getenv|environ\.get|environ\[|setenv)\(?\s*"(KTUNE_[A-Z0-9_]+)")re");
  std::set<std::string> names_read;
  for (const char* dir : {"config", "daemon", "tuner", "store", "client", "templates", "tests"}) {
    for (const auto& e : fs::recursive_directory_iterator(fs::path(KTUNE_SOURCE_DIR) / dir)) {
      const auto ext = e.path().extension();
      if (!e.is_regular_file() || (ext != ".cc" && ext != ".h" && ext != ".py")) continue;
      std::ifstream in(e.path());
      const std::string text((std::istreambuf_iterator<char>(in)),
                             std::istreambuf_iterator<char>());
      for (std::sregex_iterator it(text.begin(), text.end(), read_re), end; it != end; ++it)
        names_read.insert((*it)[1].str());
    }
  }
  std::set<std::string> overrides;
  for (const auto& key : config_keys()) overrides.emplace(key.env);
  std::set<std::string> other(other_environment().begin(), other_environment().end());
  std::set<std::string> expected;
  for (const auto& name : names_read)
    if (!overrides.count(name)) expected.insert(name);
  EXPECT_EQ(other, expected);
  EXPECT_TRUE(names_read.count("KTUNE_SOCKET") && names_read.count("KTUNE_HOME"))
      << "the scan found nothing";
}

TEST(ConfigTest, UnknownSection) {
  DaemonConfig c = default_config();
  auto r = apply_config_yaml(c, "servr:\n  socket: /x\n", "k.yaml");
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().message, "k.yaml:1: servr: unknown section");
}

TEST(ConfigTest, WrongTypeIsRejectedAndConfigUnchanged) {
  DaemonConfig c = default_config();
  const DaemonConfig before = c;
  auto r = apply_config_yaml(c, "server:\n  io_threads: 2\n  max_connections: lots\n", "k.yaml");
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().message, "k.yaml:3: server.max_connections: expected an integer, got 'lots'");
  // Nothing of the file applied, the valid line before the bad one included.
  EXPECT_EQ(config_to_yaml(c), config_to_yaml(before));
  EXPECT_EQ(c.io_threads, before.io_threads);
}

// NaN compares false with both bounds, so it passed a `v < min || v > max` check and changed
// what lookups answer (nearest_radius=nan); strtod reads "nan" and "inf" as numbers.
TEST(ConfigTest, NanAndInfinityAreNotNumbers) {
  for (const char* v : {"nan", "NAN", "-nan", "inf", "infinity"}) {
    DaemonConfig c = default_config();
    const double before = c.nearest_radius;
    auto r = apply_config_assignment(c, std::string("lookup.nearest_radius=") + v);
    ASSERT_FALSE(r) << v;
    EXPECT_NE(r.error().message.find("expected a number"), std::string::npos) << r.error().message;
    EXPECT_EQ(c.nearest_radius, before);
    EXPECT_FALSE(apply_config_env(c, {{"KTUNE_NEAREST_RADIUS", v}})) << v;
  }
}

// A key or section given twice is an error naming both lines (yaml-cpp keeps both; the later
// would win silently).
TEST(ConfigTest, AKeyGivenTwiceIsRefused) {
  DaemonConfig c = default_config();
  auto r = apply_config_yaml(c, "tuning:\n  strategy: random\n  strategy: anneal\n", "k.yaml");
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().message, "k.yaml:3: tuning.strategy: given twice (first at line 2)");
  r = apply_config_yaml(c,
                        "tuning:\n  strategy: random\nserver:\n  io_threads: 2\ntuning:\n"
                        "  finalists: 3\n",
                        "k.yaml");
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().message, "k.yaml:5: tuning: given twice (first at line 1)");
  EXPECT_EQ(c.strategy, default_config().strategy);
}

TEST(ConfigTest, OutOfRangeIsRejected) {
  DaemonConfig c = default_config();
  auto r = apply_config_yaml(c, "tuning:\n  idle_threshold_percent: 150\n", "k.yaml");
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().message,
            "k.yaml:2: tuning.idle_threshold_percent: value 150 out of range [0, 100]");
  r = apply_config_yaml(c, "tuning:\n  strategy: genetic\n", "k.yaml");
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("k.yaml:2: tuning.strategy: unknown strategy 'genetic'"),
            std::string::npos);
  r = apply_config_yaml(c, "tuning:\n  timing_l2: warm\n", "k.yaml");
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("k.yaml:2: tuning.timing_l2: unknown timing_l2 'warm'"),
            std::string::npos);
  EXPECT_EQ(c.timing_l2, "flushed") << "a rejected value leaves the default";
}

TEST(ConfigTest, ListExpectedWhereScalarGiven) {
  DaemonConfig c = default_config();
  auto r = apply_config_yaml(c, "templates:\n  dirs: /opt/t\n", "k.yaml");
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().message, "k.yaml:2: templates.dirs: expected a list, e.g. [a, b]");
}

TEST(ConfigTest, SyntaxErrorHasLine) {
  DaemonConfig c = default_config();
  auto r = apply_config_yaml(c, "server:\n  socket: [unclosed\n", "k.yaml");
  ASSERT_FALSE(r);
  EXPECT_TRUE(r.error().message.starts_with("k.yaml:")) << r.error().message;
}

TEST(ConfigTest, PrecedenceFlagsOverEnvOverFile) {
  DaemonConfig c = default_config();
  ASSERT_TRUE(apply_config_yaml(c, "tuning:\n  budget_trials: 10\n  strategy: random\n", "f"));
  ASSERT_TRUE(apply_config_env(c, {{"KTUNE_BUDGET_TRIALS", "20"}, {"KTUNE_DEVICES", "0,2"}}));
  ASSERT_TRUE(apply_config_assignment(c, "tuning.budget_trials=30"));
  EXPECT_EQ(c.budget_trials, 30);
  EXPECT_EQ(c.strategy, "random");
  EXPECT_EQ(c.devices, (std::vector<int>{0, 2}));
}

TEST(ConfigTest, EnvErrorsNameTheVariable) {
  DaemonConfig c = default_config();
  auto r = apply_config_env(c, {{"KTUNE_IO_THREADS", "0"}});
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().message,
            "environment KTUNE_IO_THREADS: server.io_threads: value 0 out of range [1, 64]");
}

TEST(ConfigTest, EnvListsSplitOnColon) {
  DaemonConfig c = default_config();
  ASSERT_TRUE(apply_config_env(c, {{"KTUNE_TEMPLATE_DIRS", "/a:/b"}}));
  EXPECT_EQ(c.template_dirs, (std::vector<std::string>{"/a", "/b"}));
}

TEST(ConfigTest, BadAssignment) {
  DaemonConfig c = default_config();
  EXPECT_FALSE(apply_config_assignment(c, "tuning.budget_trials"));
  auto r = apply_config_assignment(c, "log.level=loud");
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("unknown level 'loud'"), std::string::npos);
}

// Any TCP listener needs a token, loopback too (a local user or a browser page can reach it); the
// error names the key and how to generate one.
TEST(ConfigTest, EveryTcpListenerNeedsAToken) {
  for (const char* address : {"0.0.0.0:7878", "127.0.0.1:7878", "[::1]:7878", "localhost:7878"}) {
    DaemonConfig c = default_config();
    ASSERT_TRUE(apply_config_assignment(c, std::string("server.tcp=") + address));
    auto r = validate_config(c);
    ASSERT_FALSE(r) << address;
    EXPECT_NE(r.error().message.find("server.tcp_token"), std::string::npos) << r.error().message;
    EXPECT_NE(r.error().message.find("openssl rand -hex 32"), std::string::npos)
        << r.error().message;
    ASSERT_TRUE(apply_config_assignment(c, "server.tcp_token=s3cret"));
    EXPECT_TRUE(validate_config(c)) << address;
  }
  DaemonConfig c = default_config();
  EXPECT_FALSE(apply_config_assignment(c, "server.tcp=localhost"));  // no port
}

TEST(ConfigTest, TcpAdminTokenMustDifferFromTheReadToken) {
  DaemonConfig c = default_config();
  ASSERT_TRUE(apply_config_assignment(c, "server.tcp=127.0.0.1:7878"));
  ASSERT_TRUE(apply_config_assignment(c, "server.tcp_token=s3cret"));
  ASSERT_TRUE(apply_config_assignment(c, "server.tcp_admin_token=s3cret"));
  auto r = validate_config(c);
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("server.tcp_admin_token equals server.tcp_token"),
            std::string::npos)
      << r.error().message;
  ASSERT_TRUE(apply_config_assignment(c, "server.tcp_admin_token=other"));
  EXPECT_TRUE(validate_config(c));
}

TEST(ConfigTest, PrintedConfigLoadsBackIdentically) {
  DaemonConfig c = default_config();
  ASSERT_TRUE(apply_config_assignment(c, "templates.dirs=/x:/y"));
  ASSERT_TRUE(apply_config_assignment(c, "log.format=json"));
  DaemonConfig d;
  auto r = apply_config_yaml(d, config_to_yaml(c), "printed");
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(config_to_yaml(c), config_to_yaml(d));
}

}  // namespace
}  // namespace ktune
