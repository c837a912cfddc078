// The ktune CLI as a user types it, against a real ktuned on a private socket: flags in any
// position, errors that say what is valid (and, with --json, are JSON with the documented exit
// code), the default GEMM layout, device classes by substring, export/import round trips in every
// format. Label "e2e".
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <set>
#include <sstream>

#include "config/config.h"
#include "store/table_io.h"
#include "templates/registry.h"
#include "templates/space.h"
#include "tests/fakes/daemon_process.h"
#include "tests/fakes/require_tool.h"
#include "tests/fakes/test_records.h"

namespace ktune {
namespace {

using protocol::Json;
using testing::DaemonProcess;
using testing::TempDir;

const std::string k_h200 = "nvidia-h200.sm90.132sm.140gib";

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// Two H200 bf16 rc gemm winners (4096^3 and M=16) measured with the installed gemm template.
std::vector<WinnerRecord> h200_winners() {
  const auto reg = TemplateRegistry::load({builtin_template_dir()});
  const KernelTemplate* gemm = reg.find("gemm");
  std::vector<WinnerRecord> records;
  for (auto [m, us] : {std::pair{4096, 190.0}, std::pair{16, 22.5}}) {
    auto w = testing::winner(
        Problem{"gemm", "bf16", "bf16", "rc", {{"M", m}, {"N", 4096}, {"K", 4096}}}, us);
    for (auto& c : w.ranked) {
      c.template_hash = gemm->hash;
      c.params = *heuristic_config(*gemm, w.problem, DeviceLimits{});
    }
    w.ranked.resize(1);
    w.ranked[0].median_us = us + 0.123456789;  // digits a lossy writer would drop
    w.validators.nvrtc = "13.0";
    if (m == 4096) w.timing_l2 = TimingL2::rotated;  // the other does not say
    records.push_back(w);
  }
  return records;
}

class CliTest : public ::testing::Test {
 public:
  CliTest() : m_daemon(m_dir / "ktuned.sock", m_dir / "data") {}
  void SetUp() override {
    ASSERT_TRUE(m_daemon.start()) << "ktuned did not start; log: " << m_daemon.log_path();
    ASSERT_TRUE(
        write_file_atomic(m_dir / "h200.json", render_table(h200_winners(), TableFormat::json)));
    ASSERT_EQ(run("import " + (m_dir / "h200.json")), 0) << m_err;
  }

  // Runs `ktune ARGS --socket S` (the socket flag last, as users append it); stdout in m_out,
  // stderr in m_err; returns the exit code.
  int run(const std::string& args) { return run_raw(args + " --socket " + m_daemon.socket()); }
  int run_raw(const std::string& args) {
    auto [rc, out] =
        testing::run_command(testing::ktune_cli_path() + " " + args + " 2>" + (m_dir / "stderr"));
    m_out = out;
    m_err = slurp(m_dir / "stderr");
    return rc;
  }
  Json out_json() const {
    try {
      return Json::parse(m_out);
    } catch (const std::exception& e) {
      ADD_FAILURE() << "stdout is not JSON: " << e.what() << "\n" << m_out << "\nstderr: " << m_err;
      return Json::object();
    }
  }

  TempDir m_dir;
  DaemonProcess m_daemon;
  std::string m_out, m_err;
};

// README's and docs/protocol.md's commands put --json (and users put --socket) after the
// subcommand; nested subcommands take them too.
TEST_F(CliTest, GlobalFlagsWorkInAnyPosition) {
  ASSERT_EQ(run("lookup gemm --dtype bf16 --layout rc --shape M=4096,N=4096,K=4096 --device " +
                k_h200 + " --json --timeout-ms 4000"),
            0)
      << m_err;
  Json j = out_json();
  EXPECT_EQ(j["schema_version"], protocol::k_cli_schema_version);
  EXPECT_EQ(j["entries"][0]["provenance"], "exact");

  ASSERT_EQ(run_raw("--json lookup gemm --layout rc --shape M=4096,N=4096,K=4096 --device " +
                    k_h200 + " --socket " + m_daemon.socket()),
            0)
      << m_err;
  EXPECT_EQ(out_json()["entries"][0]["provenance"], "exact");

  ASSERT_EQ(run("fleet status --json"), 0) << m_err;
  EXPECT_EQ(out_json()["enabled"], false);
  ASSERT_EQ(run("status --json"), 0) << m_err;
  EXPECT_EQ(out_json()["winners"], 2);
}

bool daemon_has_gpu(CliTest& t) {
  EXPECT_EQ(t.run("status --json"), 0);
  return !t.out_json()["gpus"].empty();
}

// Errors name what is valid, exit with the documented code, and with --json are JSON on stdout.
TEST_F(CliTest, ErrorsSayWhatIsValidWithTheDocumentedExitCode) {
  const std::string shape = " --shape M=64,N=4096,K=4096";
  EXPECT_EQ(run("lookup gemmm" + shape + " --device h200"), 4) << m_err;
  EXPECT_NE(m_err.find("unknown op 'gemmm' (ops: gemm, layernorm, reduce_sum, rmsnorm, softmax"),
            std::string::npos)
      << m_err;
  EXPECT_EQ(run("lookup gemm --layout xx" + shape + " --device h200"), 4) << m_err;
  EXPECT_NE(m_err.find("gemm has no layout 'xx' (layouts: cc, cr, rc, rr)"), std::string::npos)
      << m_err;
  EXPECT_EQ(run("lookup gemm --layout rc" + shape + " --device amd-mi300"), 5) << m_err;
  EXPECT_NE(m_err.find("is unknown (known: " + k_h200), std::string::npos) << m_err;

  // --json: the error is a JSON document on stdout, nothing on stderr.
  EXPECT_EQ(run("lookup gemmm" + shape + " --device h200 --json"), 4);
  Json j = out_json();
  EXPECT_EQ(j["schema_version"], protocol::k_cli_schema_version);
  EXPECT_EQ(j["error"]["code"], "invalid_problem");
  EXPECT_EQ(j["error"]["exit_code"], 4);
  EXPECT_NE(j["error"]["message"].get<std::string>().find("softmax"), std::string::npos);
  EXPECT_EQ(m_err, "");
  // Usage errors too, and CLI11's own numbers (106, 109) become 2.
  EXPECT_EQ(run("lookup gemm" + shape + " --timeout-ms -5"), 2);
  EXPECT_NE(m_err.find("--timeout-ms"), std::string::npos) << m_err;
  EXPECT_EQ(run("lookup gemm" + shape + " --frobnicate --json"), 2);
  EXPECT_EQ(out_json()["error"]["code"], "usage");
  EXPECT_EQ(run_raw("lookup gemm" + shape + " --json --socket " + (m_dir / "nobody.sock")), 3);
  EXPECT_EQ(out_json()["error"]["code"], "connection_failed");

  // tune: the op and the strategy are checked before anything about this node's GPUs.
  EXPECT_EQ(run("tune gemmm" + shape + " --strategy bogus"), 2);
  EXPECT_NE(m_err.find("--strategy: bogus not in"), std::string::npos) << m_err;
  EXPECT_EQ(run("tune gemmm" + shape + " --no-wait"), 4);
  EXPECT_NE(m_err.find("unknown op 'gemmm'"), std::string::npos) << m_err;
  EXPECT_EQ(run("tune gemm --layout xx" + shape + " --no-wait"), 4);
  EXPECT_NE(m_err.find("has no layout 'xx'"), std::string::npos) << m_err;
  // ... and so are the templates and seeds it names (a typo shows on a node without a GPU too).
  EXPECT_EQ(run("tune gemm" + shape + " --template nosuch --no-wait"), 5) << m_err;
  EXPECT_NE(m_err.find("unknown template 'nosuch' (installed: "), std::string::npos) << m_err;
  EXPECT_EQ(run("tune gemm" + shape + " --template softmax --no-wait"), 1) << m_err;
  EXPECT_NE(m_err.find("template softmax implements softmax, not gemm"), std::string::npos)
      << m_err;
  EXPECT_EQ(run("tune gemm" + shape + " --seed NOPE=1 --no-wait"), 1) << m_err;
  EXPECT_NE(m_err.find("seeds[0] is a config of none of the templates"), std::string::npos)
      << m_err;

  // import: errors name the file as typed, at the position the parser stopped; a string that is
  // not UTF-8 is refused before it is sent, not an abort.
  std::ofstream(m_dir / "empty.json").flush();
  EXPECT_EQ(run("import " + (m_dir / "empty.json")), 1) << m_err;
  EXPECT_NE(m_err.find(m_dir / "empty.json" + ": empty: no table in it"), std::string::npos)
      << m_err;
  std::ofstream(m_dir / "cut.json") << "{\"ktune_table\": 1, \"winners\": [tru";
  EXPECT_EQ(run("import " + (m_dir / "cut.json")), 1) << m_err;
  EXPECT_NE(m_err.find(m_dir / "cut.json" + ":1:"), std::string::npos) << m_err;
  EXPECT_EQ(run("lookup \"$(printf 'gem\\377m')\"" + shape + " --device h200 --json"), 1);
  EXPECT_EQ(out_json()["error"]["code"], "bad_request");

  if (daemon_has_gpu(*this)) GTEST_SKIP() << "the no-GPU errors need a node without a GPU";
  // No GPU and no --device: the message says which flag names a class, not the wire field.
  EXPECT_EQ(run("lookup softmax --shape rows=8,cols=8"), 6) << m_err;
  EXPECT_NE(m_err.find("--device"), std::string::npos) << m_err;
  EXPECT_EQ(m_err.find("\"device\""), std::string::npos) << m_err;
  EXPECT_NE(m_err.find("known: " + k_h200), std::string::npos) << m_err;
}

// A file on which open(2) fails although it exists, or "" where none can be made (root reads
// any file it owns; a write-only proc file it cannot).
std::string unreadable_file(const TempDir& dir) {
  const std::string mine = dir / "unreadable.json";
  std::ofstream(mine) << "{}";
  std::filesystem::permissions(mine, std::filesystem::perms::none);
  for (const std::string& path : {mine, std::string("/proc/sys/vm/compact_memory")}) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
      ::close(fd);
      continue;
    }
    if (errno != ENOENT && std::filesystem::is_regular_file(path)) return path;
  }
  return "";
}

// The exit codes docs/cli.md gives, where commands disagreed with it or with each other: an
// unreadable file is 1 (was 5, not_found), an unknown template 5 for tune as for kernel (was 1),
// a malformed or missing --config and a bad standalone flag are usage, 2 (were 1, the latter
// after looking for a GPU).
TEST_F(CliTest, ExitCodesAreTheDocumentedOnes) {
  // A file that cannot be read, where one can be made (not as root without /proc/sys), and a
  // directory everywhere.
  std::vector<std::pair<std::string, std::string>> unreadable = {
      {std::string(m_dir / ""), ": not a file"}};
  if (const std::string file = unreadable_file(m_dir); !file.empty())
    unreadable.emplace_back(file, ": cannot read: ");
  else
    RecordProperty("unreadable_file", "none could be made here");
  for (const auto& [file, why] : unreadable) {
    EXPECT_EQ(run("import " + file + " --json"), 1) << m_out;
    EXPECT_EQ(out_json()["error"]["code"], "failed") << m_out;
    EXPECT_NE(out_json()["error"]["message"].dump().find(file + why), std::string::npos) << m_out;
  }
  const std::string shape = " --shape rows=64,cols=4096 --device h200";
  EXPECT_EQ(
      run("kernel softmax" + shape + " --template nosuch --config X=1 -o " + (m_dir / "k.cubin")),
      5)
      << m_err;
  EXPECT_EQ(run("tune softmax" + shape + " --template nosuch --no-wait --json"), 5) << m_out;
  EXPECT_EQ(out_json()["error"]["code"], "not_found") << m_out;
  EXPECT_EQ(run("tune softmax" + shape + " --template nosuch --standalone --no-import"), 5)
      << m_err;
  EXPECT_NE(m_err.find("unknown template 'nosuch' (installed: "), std::string::npos) << m_err;

  EXPECT_EQ(run("kernel softmax" + shape + " --template softmax -o " + (m_dir / "k.cubin")), 2)
      << m_err;
  EXPECT_NE(m_err.find("--template softmax needs --config"), std::string::npos) << m_err;
  EXPECT_EQ(run("compile softmax --config MODE=1 --json"), 2) << m_out;
  EXPECT_EQ(out_json()["error"]["code"], "usage") << m_out;
  EXPECT_NE(out_json()["error"]["message"].dump().find("--config: "), std::string::npos) << m_out;
  // A problem the template does not implement is a failure (1) with or without --config: only
  // what --config itself says can be a usage error.
  EXPECT_EQ(run("compile gemm_sm90 --arch sm_80 --sample 1"), 1) << m_err;
  EXPECT_EQ(run("compile gemm_sm90 --arch sm_80 --config BLOCK_M=64"), 1) << m_err;
  EXPECT_NE(m_err.find("does not implement"), std::string::npos) << m_err;

  EXPECT_EQ(run("tune softmax" + shape + " --standalone --seed garbage"), 2) << m_err;
  EXPECT_NE(m_err.find("--seed garbage: "), std::string::npos) << m_err;
  EXPECT_EQ(run("tune softmax" + shape + " --standalone --gpu -3"), 2) << m_err;
  EXPECT_NE(m_err.find("--gpu"), std::string::npos) << m_err;
}

// --device takes any unique part of a class id, as the daemon resolves it for every op.
TEST_F(CliTest, DeviceClassesMatchByAnyUniqueSubstring) {
  for (const char* name : {"h200", "H200", "nvidia-h200", "sm90.132sm", k_h200.c_str()}) {
    ASSERT_EQ(run(std::string("lookup gemm --layout rc --shape M=4096,N=4096,K=4096 --json "
                              "--device ") +
                  name),
              0)
        << name << ": " << m_err;
    EXPECT_EQ(out_json()["device"], k_h200) << name;
    EXPECT_EQ(out_json()["entries"][0]["provenance"], "exact") << name;
  }
}

// A gemm lookup without --layout is answered for rc, the tuned layout, and says it assumed it.
TEST_F(CliTest, GemmLayoutDefaultsToRcAndTheReplySaysSo) {
  ASSERT_EQ(run("lookup gemm --shape M=4096,N=4096,K=4096 --device h200"), 0) << m_err;
  EXPECT_NE(m_out.find("gemm|bf16|bf16|rc|M=4096,N=4096,K=4096 on " + k_h200), std::string::npos)
      << m_out;
  EXPECT_NE(m_out.find("layout rc assumed"), std::string::npos) << m_out;
  EXPECT_NE(m_out.find("exact"), std::string::npos) << m_out;
  EXPECT_NE(m_out.find("time of #1 taken with launches back to back, inputs rotated"),
            std::string::npos)
      << m_out;
  ASSERT_EQ(run("lookup gemm --shape M=16,N=4096,K=4096 --device h200"), 0) << m_err;
  EXPECT_EQ(m_out.find("time of #1 taken"), std::string::npos) << "its record does not say";
  ASSERT_EQ(run("lookup gemm --shape M=4096,N=4096,K=4096 --device h200 --json"), 0) << m_err;
  Json j = out_json();
  EXPECT_EQ(j["assumed"]["layout"], "rc");
  EXPECT_EQ(j["entries"][0]["provenance"], "exact");
  ASSERT_EQ(run("lookup gemm --layout rr --shape M=4096,N=4096,K=4096 --device h200 --json"), 0);
  EXPECT_FALSE(out_json().contains("assumed"));
  EXPECT_EQ(out_json()["problem_key"], "gemm|bf16|bf16|rr|M=4096,N=4096,K=4096");
}

// `ktune pin` end to end: a pin answers `lookup --pin` with its snapshot after a faster winner
// replaced the live one; list, show, delete; a taken name exits 1, an unknown pin 5.
TEST_F(CliTest, PinsFreezeWhatLookupAnswers) {
  ASSERT_EQ(run("pin create run1 --device h200 --op gemm"), 0) << m_err;
  EXPECT_NE(m_out.find("pinned run1: 2 winners (" + k_h200 + ", op gemm)"), std::string::npos)
      << m_out;
  auto faster = h200_winners();
  faster.resize(1);
  faster[0].ranked[0].median_us = 150.0;
  faster[0].ranked[0].tflops = 0;  // not stated: import checks a stated one against median_us
  ASSERT_TRUE(write_file_atomic(m_dir / "faster.json", render_table(faster, TableFormat::json)));
  ASSERT_EQ(run("import " + (m_dir / "faster.json")), 0) << m_err;
  const std::string lookup = "lookup gemm --shape M=4096,N=4096,K=4096 --device h200";
  ASSERT_EQ(run(lookup + " --json"), 0) << m_err;
  EXPECT_EQ(out_json()["entries"][0]["median_us"], 150.0);
  ASSERT_EQ(run(lookup + " --pin run1 --json"), 0) << m_err;
  EXPECT_EQ(out_json()["entries"][0]["median_us"], 190.123456789);
  EXPECT_EQ(out_json()["pin"]["name"], "run1");
  ASSERT_EQ(run(lookup + " --pin run1"), 0) << m_err;
  EXPECT_NE(m_out.find("answered from pin run1 (id "), std::string::npos) << m_out;
  ASSERT_EQ(run("pin list"), 0) << m_err;
  EXPECT_NE(m_out.find("run1"), std::string::npos) << m_out;
  ASSERT_EQ(run("pin show run1 --json"), 0) << m_err;
  EXPECT_EQ(out_json()["winners"].size(), 2u);
  EXPECT_EQ(run("pin create run1"), 1) << "pins are immutable";
  EXPECT_NE(m_err.find("already_exists"), std::string::npos) << m_err;
  ASSERT_EQ(run("pin delete run1"), 0) << m_err;
  EXPECT_EQ(run(lookup + " --pin run1"), 5);
  EXPECT_NE(m_err.find("no pin 'run1'"), std::string::npos) << m_err;
  EXPECT_EQ(run("pin create 'bad name'"), 1);
}

// --timeout-ms is a kernel request's deadline too (it kept the Client's 60 s, so a compile queued
// behind tuning failed even with 0, "none"): a deadline shorter than the compile the request
// waits for is a timeout (exit 3); 0 waits for it.
TEST_F(CliTest, TimeoutMsIsTheKernelRequestsDeadlineToo) {
  const std::string cubin = m_dir / "softmax.cubin";
  const std::string kernel =
      "kernel softmax --shape rows=64,cols=4096 --device h200 --template softmax --config "
      "THREADS=256,ROWS_PER_BLOCK=2,VEC=8,MODE=0,UNROLL=1 -o " +
      cubin;
  EXPECT_EQ(run(kernel + " --timeout-ms 1 --json"), 3) << m_out;  // an NVRTC compile takes longer
  EXPECT_EQ(out_json()["error"]["code"], "timeout") << m_out;
  EXPECT_FALSE(std::filesystem::exists(cubin));
  ASSERT_EQ(run(kernel + " --timeout-ms 0"), 0) << m_err;
  EXPECT_TRUE(std::filesystem::exists(cubin));
}

// A table exported as JSON, YAML or CSV imports into another daemon as the same winners; export
// names devices as lookup does, and one that names no class is an error.
TEST_F(CliTest, EveryExportFormatImportsBackToTheSameWinners) {
  ASSERT_EQ(run("export --format json -o " + (m_dir / "all.json")), 0) << m_err;
  std::vector<ImportRejection> rejected;
  const auto original = parse_table(slurp(m_dir / "all.json"), "all.json", rejected);
  ASSERT_TRUE(original) << original.error().message;
  ASSERT_EQ(original->size(), 2u);
  for (const char* format : {"yaml", "csv"}) {
    const std::string file = m_dir / (std::string("t.") + format);
    ASSERT_EQ(run(std::string("export --format ") + format + " --device h200 -o " + file), 0)
        << m_err;
    TempDir other;
    DaemonProcess second(other / "ktuned.sock", other / "data");
    ASSERT_TRUE(second.start()) << "second ktuned did not start";
    const std::string socket = " --socket " + second.socket();
    ASSERT_EQ(run_raw("import " + file + socket), 0) << format << ": " << m_err;
    EXPECT_NE(m_out.find("2 added"), std::string::npos) << m_out;
    ASSERT_EQ(run_raw("export --format json -o " + (other / "back.json") + socket), 0) << m_err;
    const auto back = parse_table(slurp(other / "back.json"), "back.json", rejected);
    ASSERT_TRUE(back) << back.error().message;
    EXPECT_EQ(*back, *original) << format;
  }
  EXPECT_TRUE(rejected.empty());
  // Devices as in lookup: a part of an id selects, a name of no class is not_found (exit 5).
  EXPECT_EQ(run("export --device a100 -o " + (m_dir / "none.json")), 5) << m_err;
  EXPECT_NE(m_err.find("device class 'a100' is unknown"), std::string::npos) << m_err;
  EXPECT_FALSE(std::filesystem::exists(m_dir / "none.json"));
  EXPECT_EQ(run("lookup gemm --shape M=8,N=8,K=8 --device a100"), 5) << "consistent with lookup";
}

// A free TCP port on the IPv6 loopback, or 0 where this machine has no ::1.
int free_ipv6_loopback_port() {
  const int fd = ::socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return 0;
  sockaddr_in6 a{};
  a.sin6_family = AF_INET6;
  a.sin6_addr = in6addr_loopback;
  socklen_t len = sizeof a;
  int port = 0;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0)
    port = ntohs(a.sin6_port);
  ::close(fd);
  return port;
}

// --tcp '[::1]:PORT', the form the validator takes and `ktune status` prints, reaches a ktuned
// listening there (the brackets went to getaddrinfo, which could not resolve them).
TEST(CliTcpTest, ConnectsToABracketedIpv6Address) {
  const int port = free_ipv6_loopback_port();
  if (port == 0) GTEST_SKIP() << "no IPv6 loopback on this machine";
  TempDir dir;
  const std::string address = "[::1]:" + std::to_string(port);
  DaemonProcess daemon(dir / "ktuned.sock", dir / "data",
                       {"--set", "server.tcp=" + address, "--set", "server.tcp_token=t0ken"});
  ASSERT_TRUE(daemon.start()) << "ktuned did not start; log: " << slurp(daemon.log_path());
  auto [rc, out] = testing::run_command(testing::ktune_cli_path() + " status --json --tcp '" +
                                        address + "' --token t0ken 2>&1");
  ASSERT_EQ(rc, 0) << out;
  EXPECT_EQ(Json::parse(out)["pid"], daemon.pid()) << out;
}

// `ktune compile` (NVRTC here, no daemon, no GPU) honours a template's arch suffix as lookups do:
// the default --arch sm_90 compiles gemm_sm90 (wgmma) for sm_90a.
TEST(CliCompileTest, DefaultArchGetsTheTemplatesSuffix) {
  auto [rc, out] =
      testing::run_command(testing::ktune_cli_path() + " compile gemm_sm90 --sample 1 --json");
  ASSERT_EQ(rc, 0) << out;
  Json j = Json::parse(out);
  EXPECT_EQ(j["arch"], "sm_90a");
  ASSERT_EQ(j["results"].size(), 1u);
  EXPECT_EQ(j["results"][0]["status"], "ok") << j["results"][0]["log"];
  // A template without a suffix keeps the arch as given.
  std::tie(rc, out) =
      testing::run_command(testing::ktune_cli_path() + " compile softmax --sample 1 --json");
  ASSERT_EQ(rc, 0) << out;
  EXPECT_EQ(Json::parse(out)["arch"], "sm_90");
}

// `ktune compile --cubin-dir` writes each compiled cubin, named by template and config, for
// cuobjdump/nvdisasm: two sampled softmax configs give two ELF files.
TEST(CliCompileTest, CubinDirGetsOneElfFilePerCompiledConfig) {
  TempDir dir;
  const std::string out_dir = dir / "cubins";
  auto [rc, out] = testing::run_command(testing::ktune_cli_path() +
                                        " compile softmax --sample 2 --json --cubin-dir " +
                                        out_dir);
  ASSERT_EQ(rc, 0) << out;
  std::vector<std::filesystem::path> files;
  for (const auto& e : std::filesystem::directory_iterator(out_dir)) files.push_back(e.path());
  ASSERT_EQ(files.size(), 2u);
  for (const auto& f : files) {
    EXPECT_TRUE(f.filename().string().starts_with("softmax-")) << f;
    EXPECT_EQ(f.extension(), ".cubin") << f;
    std::ifstream in(f, std::ios::binary);
    char magic[4] = {};
    in.read(magic, 4);
    EXPECT_EQ(std::string(magic, 4), std::string("\x7f" "ELF", 4)) << f;
  }
}

// Usage errors a daemon never sees: a misspelt command is named as such, a positive flag says
// so in words, a file that is not there is exit 1 like every unreadable file.
TEST(CliUsageTest, MisspeltCommandsBadNumbersAndMissingFiles) {
  const std::string cli = testing::ktune_cli_path() + " --socket /nonexistent/k.sock ";
  auto [rc, out] = testing::run_command(cli + "lokup gemm --shape M=1,N=1,K=1 2>&1");
  EXPECT_EQ(rc, 2) << out;
  EXPECT_NE(out.find("unknown command 'lokup' (commands: status, templates, lookup,"),
            std::string::npos)
      << out;
  std::tie(rc, out) = testing::run_command(cli + "compile softmax --sample 0 2>&1");
  EXPECT_EQ(rc, 2) << out;
  EXPECT_NE(out.find("--sample: must be a number above 0, got '0'"), std::string::npos) << out;
  EXPECT_LT(out.size(), 200u) << "no 309-digit bound";
  // compile checks the problem as a lookup does, then the template's dtypes.
  std::tie(rc, out) = testing::run_command(cli + "compile softmax --shape rows=0,cols=4 2>&1");
  EXPECT_EQ(rc, 4) << out;
  EXPECT_NE(out.find("rows=0 out of range [1, 2^31)"), std::string::npos) << out;
  std::tie(rc, out) = testing::run_command(cli + "compile gemm_tma --dtype fp32 2>&1");
  EXPECT_EQ(rc, 2) << out;
  EXPECT_NE(out.find("--dtype: template gemm_tma takes bf16, fp16, not 'fp32'"), std::string::npos)
      << out;
  for (const std::string tcp : {"bogus", "127.0.0.1:99999", ":80"}) {
    std::tie(rc, out) =
        testing::run_command(testing::ktune_cli_path() + " status --tcp " + tcp + " 2>&1");
    EXPECT_EQ(rc, 2) << tcp << ": " << out;
    EXPECT_NE(out.find("expected host:port with a port 1..65535"), std::string::npos) << out;
  }
  std::tie(rc, out) = testing::run_command(cli + "lookup gemm --shape '' 2>&1");
  EXPECT_EQ(rc, 2) << out;
  EXPECT_NE(out.find("--shape: dims: none given"), std::string::npos) << out;
  std::tie(rc, out) = testing::run_command(cli + "export -o '' 2>&1");  // an unset variable
  EXPECT_EQ(rc, 2) << out;
  EXPECT_NE(out.find("--output: must name a file"), std::string::npos) << out;
  std::tie(rc, out) = testing::run_command(cli + "--json import /nonexistent/t.json");
  EXPECT_EQ(rc, 1) << out;
  EXPECT_EQ(Json::parse(out)["error"]["message"], "/nonexistent/t.json: no such file");
}

// --arch takes the listed arches and sm_90a only: sm_80a, sm_86a or sm_90aa (a trailing 'a' was
// stripped before the check) are usage errors, not a run in which NVRTC refuses every config.
TEST(CliCompileTest, ArchIsOneOfTheListed) {
  for (const std::string arch : {"sm_80a", "sm_86a", "sm_90aa"}) {
    auto [rc, out] = testing::run_command(testing::ktune_cli_path() + " compile softmax --arch " +
                                          arch + " --sample 1 --json 2>/dev/null");
    EXPECT_EQ(rc, 2) << arch << ": " << out;
    const Json doc = Json::parse(out, nullptr, /*allow_exceptions=*/false);
    ASSERT_TRUE(doc.is_object() && doc.contains("error")) << arch << ": " << out;
    EXPECT_EQ(doc["error"]["code"], "usage") << out;
    EXPECT_NE(doc["error"]["message"].dump().find("expected sm_80, sm_86, sm_89, sm_90 or sm_90a"),
              std::string::npos)
        << out;
  }
  auto [rc, out] = testing::run_command(testing::ktune_cli_path() +
                                        " compile softmax --arch sm_90a --sample 1 --json");
  ASSERT_EQ(rc, 0) << out;
  EXPECT_EQ(Json::parse(out)["arch"], "sm_90a");
}

// --config "" (an unset shell variable) is refused like -o "", not taken for no --config (compile
// sampled 8 configs instead of the one meant).
TEST(CliUsageTest, AnEmptyConfigIsRefused) {
  for (const std::string command :
       {"compile softmax --config ''",
        "kernel softmax --shape rows=8,cols=8 --template softmax --config '' -o k.cubin"}) {
    auto [rc, out] = testing::run_command(testing::ktune_cli_path() +
                                          " --socket /nonexistent/k.sock " + command + " 2>&1");
    EXPECT_EQ(rc, 2) << command << ": " << out;
    EXPECT_NE(out.find("--config: must name a config"), std::string::npos) << out;
  }
}

// A misspelt command under a command with commands of its own is named, with the valid ones (it
// read "A subcommand is required"), as a misspelt top-level command is.
TEST(CliUsageTest, AMisspeltNestedCommandIsNamed) {
  const std::string cli = testing::ktune_cli_path() + " --socket /nonexistent/k.sock ";
  auto [rc, out] = testing::run_command(cli + "pin crate x 2>&1");
  EXPECT_EQ(rc, 2) << out;
  EXPECT_NE(out.find("unknown command 'pin crate' (pin commands: create, list, show, delete)"),
            std::string::npos)
      << out;
  std::tie(rc, out) = testing::run_command(cli + "--json plan aply plan.yaml");
  EXPECT_EQ(rc, 2) << out;
  const Json doc = Json::parse(out, nullptr, /*allow_exceptions=*/false);
  ASSERT_TRUE(doc.is_object()) << out;
  EXPECT_EQ(doc["error"]["message"], "unknown command 'plan aply' (plan commands: apply)") << out;
  // A command's own arguments are not commands: a missing required one is CLI11's error.
  std::tie(rc, out) = testing::run_command(cli + "lookup gemm 2>&1");
  EXPECT_EQ(rc, 2) << out;
  EXPECT_EQ(out.find("unknown command"), std::string::npos) << out;
  EXPECT_NE(out.find("--shape is required"), std::string::npos) << out;
}

// A --cubin-dir that cannot be one is refused before anything compiles: one JSON document (the
// error), not the results followed by an error.
TEST(CliCompileTest, AnUnwritableCubinDirIsRefusedBeforeCompiling) {
  TempDir dir;
  std::ofstream(dir / "a-file") << "x";
  auto [rc, out] = testing::run_command(testing::ktune_cli_path() +
                                        " --json compile softmax --sample 1 --cubin-dir " +
                                        (dir / "a-file") + " 2>/dev/null");
  EXPECT_EQ(rc, 1) << out;
  const Json doc = Json::parse(out, nullptr, /*allow_exceptions=*/false);
  ASSERT_FALSE(doc.is_discarded()) << "not one JSON document:\n" << out;
  EXPECT_EQ(doc["error"]["code"], "failed") << out;
  EXPECT_FALSE(doc.contains("results")) << out;
}

// A cubin that cannot be written (its name is taken by a directory) fails the run with one
// --json document: the results and the error together (the report was printed before the cubins
// were written, and the error as a second document after it).
TEST(CliCompileTest, ACubinWriteFailureIsPartOfTheOneReport) {
  TempDir dir;
  const std::string cubin_dir = dir / "cubins";
  std::filesystem::create_directories(
      std::filesystem::path(cubin_dir) /
      "softmax-MODE-0_ROWS_PER_BLOCK-2_THREADS-256_UNROLL-1_VEC-8.cubin");
  auto [rc, out] = testing::run_command(
      testing::ktune_cli_path() +
      " --json compile softmax --config THREADS=256,ROWS_PER_BLOCK=2,VEC=8,MODE=0,UNROLL=1 "
      "--cubin-dir " +
      cubin_dir + " 2>/dev/null");
  EXPECT_EQ(rc, 1) << out;
  const Json doc = Json::parse(out, nullptr, /*allow_exceptions=*/false);
  ASSERT_TRUE(doc.is_object()) << "not one JSON document:\n" << out;
  ASSERT_EQ(doc["results"].size(), 1u) << out;
  EXPECT_EQ(doc["results"][0]["status"], "ok") << out;
  EXPECT_EQ(doc["error"]["code"], "failed") << out;
  EXPECT_EQ(doc["error"]["exit_code"], 1) << out;
  EXPECT_NE(doc["error"]["message"].dump().find("softmax-MODE-0_"), std::string::npos) << out;
}

// `ktune completion bash`, sourced in bash, completes as a user's <TAB> would: the test sets
// COMP_WORDS/COMP_CWORD and calls _ktune as bash-completion does, then reads COMPREPLY.
class CliCompletionTest : public ::testing::Test {
 public:
  void SetUp() override {
    auto [rc, script] = testing::run_command(testing::ktune_cli_path() + " completion bash");
    ASSERT_EQ(rc, 0) << script;
    ASSERT_TRUE(write_file_atomic(m_dir / "ktune.bash", script));
    ASSERT_TRUE(write_file_atomic(m_dir / "h200.json", "{}"));
    ASSERT_TRUE(write_file_atomic(m_dir / "plan.yaml", "{}"));
  }

  // COMPREPLY, sorted, for the command line WORDS whose last word is being completed.
  std::set<std::string> complete(const std::vector<std::string>& words) {
    std::string line = "cd '" + m_dir.path() + "' && source ktune.bash && COMP_WORDS=(";
    for (const auto& w : words) line += " '" + w + "'";
    line += " ); COMP_CWORD=" + std::to_string(words.size() - 1) +
            "; _ktune && printf '%s\\n' \"${COMPREPLY[@]}\"";
    EXPECT_TRUE(write_file_atomic(m_dir / "complete.sh", line));
    auto [rc, out] = testing::run_command("bash " + (m_dir / "complete.sh") + " 2>&1");
    EXPECT_EQ(rc, 0) << out;
    std::set<std::string> reply;
    std::istringstream in(out);
    for (std::string w; std::getline(in, w);)
      if (!w.empty()) reply.insert(w);
    return reply;
  }

  // The first word of each entry of SECTION ("Subcommands:", "Options:") of `ktune PATH --help`,
  // the list CLI11 itself prints; "-h,--help" gives -h and --help.
  static std::set<std::string> help_section(const std::string& path, const std::string& section) {
    auto [rc, help] = testing::run_command(testing::ktune_cli_path() + " " + path + " --help");
    EXPECT_EQ(rc, 0) << help;
    std::set<std::string> names;
    const auto at = help.find("\n" + section + "\n");
    if (at == std::string::npos) return names;
    std::istringstream in(help.substr(at + section.size() + 2));
    for (std::string line; std::getline(in, line) && !line.empty();) {
      if (line.size() < 3 || !line.starts_with("  ") || line[2] == ' ') continue;  // wrapped
      std::istringstream names_in(line.substr(2, line.find(' ', 2) - 2));
      for (std::string n; std::getline(names_in, n, ',');) names.insert(n);
    }
    return names;
  }

 protected:
  TempDir m_dir;
};

TEST_F(CliCompletionTest, CompletesCommandsOptionsAndValues) {
  using Words = std::set<std::string>;
  EXPECT_EQ(complete({"ktune", "lo"}), Words{"lookup"});
  EXPECT_EQ(complete({"ktune", "lookup", "--sh"}), Words{"--shape"});
  EXPECT_EQ(complete({"ktune", "lookup", "gemm", "--la"}), Words{"--layout"});
  EXPECT_EQ(complete({"ktune", "lookup", "--js"}), Words{"--json"}) << "global flags anywhere";
  EXPECT_EQ(complete({"ktune", "export", "--format", ""}), (Words{"json", "yaml", "yml", "csv"}));
  EXPECT_EQ(complete({"ktune", "export", "--format", "=", "y"}), (Words{"yaml", "yml"}));
  // Without "=" in COMP_WORDBREAKS (and in zsh) "--format=y" is one word: candidates keep the head.
  EXPECT_EQ(complete({"ktune", "export", "--format=y"}), (Words{"--format=yaml", "--format=yml"}));
  EXPECT_EQ(complete({"ktune", "lookup", "--layout", "r"}), (Words{"rc", "rr"}));
  EXPECT_EQ(complete({"ktune", "jobs", "--state", "r"}), Words{"running"});
  EXPECT_EQ(complete({"ktune", "completion", ""}), (Words{"bash", "zsh"}));
  // Nested subcommands, after global flags and their values.
  EXPECT_EQ(complete({"ktune", "--timeout-ms", "5", "plan", ""}), Words{"apply"});
  EXPECT_EQ(complete({"ktune", "--json", "fleet", "st"}), Words{"status"});
  // Files where an option or positional takes one.
  EXPECT_EQ(complete({"ktune", "plan", "apply", "pl"}), Words{"plan.yaml"});
  EXPECT_EQ(complete({"ktune", "import", "h2"}), Words{"h200.json"});
  EXPECT_EQ(complete({"ktune", "export", "-o", "h"}), Words{"h200.json"});
  EXPECT_EQ(complete({"ktune", "lookup", "--shape", ""}), Words{}) << "free text: nothing";
}

// Every subcommand and option CLI11 lists in --help (nested commands too) completes, so a new
// command or flag is covered without touching the completion.
TEST_F(CliCompletionTest, CoversEveryCommandAndOptionOfTheHelp) {
  std::vector<std::vector<std::string>> paths = {{}};
  for (size_t i = 0; i < paths.size(); ++i) {
    std::string path;
    for (const auto& w : paths[i]) path += (path.empty() ? "" : " ") + w;
    std::vector<std::string> words = {"ktune"};
    words.insert(words.end(), paths[i].begin(), paths[i].end());
    const auto subs = help_section(path, "Subcommands:");
    words.push_back("");
    const auto commands = complete(words);  // plus positional values (files, choices)
    for (const auto& sub : subs)
      EXPECT_TRUE(commands.contains(sub)) << "ktune " << path << " " << sub;
    words.back() = "-";
    const auto options = complete(words);
    for (const auto& o : help_section(path, "Options:"))
      EXPECT_TRUE(options.contains(o)) << "ktune " << path << " " << o;
    for (const auto& sub : subs) {
      paths.push_back(paths[i]);
      paths.back().push_back(sub);
    }
  }
  EXPECT_GE(paths.size(), 19u) << "16 commands and the nested plan apply, fleet status";
  // The global flags complete after any subcommand (they work in any position).
  const auto options = complete({"ktune", "fleet", "status", "--"});
  for (const auto& o : help_section("", "Options:"))
    if (o.starts_with("--")) {
      EXPECT_TRUE(options.contains(o)) << o;
    }
}

// `ktune completion zsh` in a real `zsh -f`, loaded both ways docs/cli.md gives: sourced after
// compinit, and saved as _ktune on $fpath (compinit autoloads it at the first <TAB>). The test
// calls the handler compinit registered for `ktune` ($_comps[ktune]) with the completion
// parameters ZLE would set (words, CURRENT, PREFIX). Outside ZLE the compadd builtin refuses to
// run, so a function stands in for it and prints what zsh's default matcher would offer: each
// candidate that starts with the word being completed.
class CliZshCompletionTest : public CliCompletionTest {
 public:
  enum class Load { source, fpath };

  void SetUp() override {
    KTUNE_REQUIRE_TOOL(testing::run_command("command -v zsh >/dev/null 2>&1").first == 0, "zsh");
    CliCompletionTest::SetUp();
    auto [rc, script] = testing::run_command(testing::ktune_cli_path() + " completion zsh");
    ASSERT_EQ(rc, 0) << script;
    ASSERT_TRUE(script.starts_with("#compdef ktune\n")) << script;
    ASSERT_TRUE(write_file_atomic(m_dir / "ktune.zsh", script));
    std::filesystem::create_directories(m_dir / "fpath");
    ASSERT_TRUE(write_file_atomic(m_dir / "fpath/_ktune", script));
    ASSERT_TRUE(write_file_atomic(m_dir / "complete.zsh", R"zsh(
load=$1; shift
autoload -U compinit
[[ $load == fpath ]] && fpath=($PWD/fpath $fpath)
compinit -u -D
[[ $load == source ]] && source ./ktune.zsh
compadd() {
  local arr='' m
  local -a out
  while (($#)); do
    case $1 in
      -) shift; break ;;
      -a) arr=$2; shift 2 ;;
      -[SPJXMpsiIWFr]) shift 2 ;;
      *) shift ;;
    esac
  done
  if [[ -n $arr ]]; then out=("${(@P)arr}"); else out=("$@"); fi
  for m in "${out[@]}"; do [[ $m == ${PREFIX}* ]] && print -r -- "$m"; done
  return 0
}
print -r -- "handler: $_comps[ktune]"
words=("$@"); CURRENT=$#; PREFIX=${words[CURRENT]}; IPREFIX=''; SUFFIX=''; ISUFFIX=''; QIPREFIX=''
eval "$_comps[ktune]" || :  # 1 when nothing matched
)zsh"));
  }

  // What <TAB> offers for WORDS (the last one being completed), sorted; m_handler gets what
  // compinit registered for ktune.
  std::set<std::string> complete_zsh(const std::vector<std::string>& words,
                                     Load load = Load::source) {
    std::string line = "cd '" + m_dir.path() + "' && zsh -f complete.zsh " +
                       (load == Load::source ? "source" : "fpath");
    for (const auto& w : words) line += " '" + w + "'";
    auto [rc, out] = testing::run_command(line + " 2>&1");
    EXPECT_EQ(rc, 0) << out;
    std::set<std::string> reply;
    std::istringstream in(out);
    for (std::string w; std::getline(in, w);)
      if (w.starts_with("handler: "))
        m_handler = w.substr(9);
      else if (!w.empty())
        reply.insert(w);
    return reply;
  }

  std::string m_handler;
};

TEST_F(CliZshCompletionTest, CompletesCommandsOptionsAndValues) {
  using Words = std::set<std::string>;
  EXPECT_EQ(complete_zsh({"ktune", "lo"}), Words{"lookup"});
  EXPECT_EQ(m_handler, "_bash_complete -F _ktune") << "sourced: registered through bashcompinit";
  EXPECT_EQ(complete_zsh({"ktune", "completion", ""}), (Words{"bash", "zsh"}));
  EXPECT_EQ(complete_zsh({"ktune", "lookup", "--sh"}), Words{"--shape"});
  EXPECT_EQ(complete_zsh({"ktune", "lookup", "gemm", "--la"}), Words{"--layout"});
  EXPECT_EQ(complete_zsh({"ktune", "lookup", "--js"}), Words{"--json"}) << "global flags anywhere";
  EXPECT_EQ(complete_zsh({"ktune", "lookup", "--layout", "r"}), (Words{"rc", "rr"}));
  EXPECT_EQ(complete_zsh({"ktune", "export", "--format", ""}),
            (Words{"json", "yaml", "yml", "csv"}));
  // zsh keeps "--format=y" one word: the candidates carry the head, or zsh would match none.
  EXPECT_EQ(complete_zsh({"ktune", "export", "--format=y"}),
            (Words{"--format=yaml", "--format=yml"}));
  EXPECT_EQ(complete_zsh({"ktune", "--timeout-ms", "5", "plan", ""}), Words{"apply"});
  EXPECT_EQ(complete_zsh({"ktune", "--json", "fleet", "st"}), Words{"status"});
  EXPECT_EQ(complete_zsh({"ktune", "import", "h2"}), Words{"h200.json"});
  EXPECT_EQ(complete_zsh({"ktune", "plan", "apply", "pl"}), Words{"plan.yaml"});
  EXPECT_EQ(complete_zsh({"ktune", "export", "-o", "h"}), Words{"h200.json"});
  EXPECT_EQ(complete_zsh({"ktune", "export", "--output=h2"}), Words{"--output=h200.json"});
  EXPECT_EQ(complete_zsh({"ktune", "lookup", "--shape", ""}), Words{}) << "free text: nothing";
}

TEST_F(CliZshCompletionTest, OffersEveryTopLevelCommandAndOptionOfTheHelp) {
  const auto commands = complete_zsh({"ktune", ""});
  const auto subs = help_section("", "Subcommands:");
  EXPECT_GE(subs.size(), 16u);
  for (const auto& sub : subs) EXPECT_TRUE(commands.contains(sub)) << sub;
  const auto options = complete_zsh({"ktune", "-"});
  for (const auto& o : help_section("", "Options:")) EXPECT_TRUE(options.contains(o)) << o;
}

// Saved on $fpath, the script is autoloaded as _ktune at the first <TAB>, which it answers too.
TEST_F(CliZshCompletionTest, FromFpathTheFirstTabCompletes) {
  using Words = std::set<std::string>;
  EXPECT_EQ(complete_zsh({"ktune", "lo"}, Load::fpath), Words{"lookup"});
  EXPECT_EQ(m_handler, "_ktune") << "compinit read #compdef ktune";
  EXPECT_EQ(complete_zsh({"ktune", "export", "--format", "c"}, Load::fpath), Words{"csv"});
}

// Reads `fd` until `done(text)` holds, EOF, or `deadline`; returns what it read.
std::string read_until(int fd, std::chrono::steady_clock::time_point deadline,
                       const std::function<bool(const std::string&)>& done) {
  std::string text;
  char buf[4096];
  while (!done(text)) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) break;
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, int(left.count())) <= 0) continue;
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n <= 0) break;  // EOF: the process exited
    text.append(buf, size_t(n));
  }
  return text;
}

// `ktune compile gemm --all` (2,700 configs) shows progress on stderr while it runs and, on
// SIGTERM, stops within seconds, prints every config it compiled and says it was interrupted,
// exiting 143 (docs/cli.md § Errors and exit codes).
TEST(CliCompileTest, SigtermPrintsResultsSoFar) {
  TempDir dir;
  int err_pipe[2];
  ASSERT_EQ(::pipe2(err_pipe, O_CLOEXEC), 0);
  const std::string out_path = dir / "stdout";
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    const int out = ::open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ::dup2(out, STDOUT_FILENO);
    ::dup2(err_pipe[1], STDERR_FILENO);
    const std::string cli = testing::ktune_cli_path();
    ::execl(cli.c_str(), cli.c_str(), "compile", "gemm", "--all", (char*)nullptr);
    ::_exit(127);
  }
  ::close(err_pipe[1]);
  using std::chrono::steady_clock;
  // Wait for the first progress line (one compile finished), however long the box takes.
  std::string err = read_until(err_pipe[0], steady_clock::now() + std::chrono::seconds(120),
                               [](const std::string& t) {
                                 const auto at = t.find("compiled ");
                                 return at != std::string::npos && t.find('\n', at) != t.npos;
                               });
  const bool progressed = err.find("compiled ") != std::string::npos;
  ::kill(pid, SIGTERM);
  const auto killed = steady_clock::now();
  err += read_until(err_pipe[0], killed + std::chrono::seconds(30),
                    [](const std::string&) { return false; });
  const double exit_s = std::chrono::duration<double>(steady_clock::now() - killed).count();
  ::close(err_pipe[0]);
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(progressed) << err;
  EXPECT_NE(err.find(" (0 failed), "), std::string::npos) << err;
  EXPECT_NE(err.find("/2700 "), std::string::npos) << err;
  EXPECT_NE(err.find(" configs/s, ETA "), std::string::npos) << err;
  ASSERT_TRUE(WIFEXITED(status)) << "killed by signal " << WTERMSIG(status) << "\n" << err;
  EXPECT_EQ(WEXITSTATUS(status), 143) << err;
  EXPECT_LT(exit_s, 5.0) << "in-flight compiles are abandoned, not waited for";
  const std::string out = slurp(out_path);
  // At least one complete result row: the config, its status and resources.
  size_t rows = 0;
  std::istringstream lines(out);
  for (std::string line; std::getline(lines, line);)
    if (line.starts_with("BLOCK_K=") && (line.find("  ok  ") != std::string::npos ||
                                         line.find("  compile_error  ") != std::string::npos))
      ++rows;
  EXPECT_GE(rows, 1u) << out;
  const std::string summary = "interrupted by SIGTERM: " + std::to_string(rows) + " of 2700";
  EXPECT_NE(out.find(summary), std::string::npos) << out;
}

// docs/cli.md's exit-code table is the one `ktune --help` prints.
TEST(CliDocTest, ExitCodeTableIsDocumented) {
  auto [rc, help] = testing::run_command(testing::ktune_cli_path() + " --help");
  ASSERT_EQ(rc, 0);
  std::set<int> in_help, in_doc;
  std::istringstream h(help.substr(help.find("Exit codes:")));
  for (std::string line; std::getline(h, line);)
    if (line.size() > 3 && line.starts_with("  ") && std::isdigit(line[2]))
      in_help.insert(std::stoi(line.substr(2)));
  std::istringstream d(slurp(std::string(KTUNE_SOURCE_DIR) + "/docs/cli.md"));
  for (std::string line; std::getline(d, line);)
    if (line.starts_with("| ") && line.size() > 2 && std::isdigit(line[2]))
      in_doc.insert(std::stoi(line.substr(2)));
  EXPECT_EQ(in_help, (std::set<int>{0, 1, 2, 3, 4, 5, 6, 7, 130, 143}));
  EXPECT_EQ(in_doc, in_help);
}

}  // namespace
}  // namespace ktune
