// The launch path end to end against a real ktuned, without a GPU: the Launcher looks a shape up
// (v2), fetches its cubin with the kernel op, checks it and keeps it; `ktune kernel` writes a
// cubin to a file. Only the launch itself needs a driver (see kernel_gpu_test.cc). And the
// Client's own connection against the real daemon's idle close. Label "e2e".
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>

#include "client/cubin.h"
#include "client/cuda_api.h"
#include "client/launcher.h"
#include "tests/fakes/daemon_process.h"
#include "tests/fakes/test_records.h"

namespace ktune {
namespace {

using testing::DaemonProcess;
using testing::run_command;
using testing::TempDir;
using Clock = std::chrono::steady_clock;

const std::string k_h200 = "nvidia-h200.sm90.132sm.140gib";

class LauncherTest : public ::testing::Test {
 protected:
  LauncherTest() : m_daemon(m_dir / "ktuned.sock", m_dir / "data") {}
  void SetUp() override { ASSERT_TRUE(m_daemon.start()) << "ktuned did not start"; }
  Client client() {
    ClientOptions o;
    o.socket_path = m_daemon.socket();
    return Client(o);
  }

  TempDir m_dir;
  DaemonProcess m_daemon;
};

TEST_F(LauncherTest, FetchesChecksAndKeepsTheKernelOfAShape) {
  Client c = client();
  Launcher launcher(c, k_h200);
  const protocol::ProblemSpec softmax{"softmax", "bf16", "", "", {{"rows", 64}, {"cols", 4096}}};
  auto k = launcher.kernel(softmax);
  ASSERT_TRUE(k) << k.error().message;
  const auto& image = (*k)->image();
  EXPECT_EQ(image.template_name, "softmax");
  EXPECT_EQ(image.device, k_h200);
  EXPECT_EQ(image.launch.arch, "sm_90");
  std::int64_t rows_per_block = 0;
  for (const auto& [n, v] : image.params)
    if (n == "ROWS_PER_BLOCK") rows_per_block = v;
  ASSERT_GT(rows_per_block, 0);
  EXPECT_EQ(image.launch.grid[0], std::uint32_t((64 + rows_per_block - 1) / rows_per_block));
  EXPECT_EQ((*k)->buffer_names(), (std::vector<std::string>{"x", "y"}));
  auto looked = c.lookup({softmax, k_h200, 1});
  ASSERT_TRUE(looked);
  EXPECT_EQ(image.launch.cubin_id, looked->entries[0].launch["cubin_id"])
      << "the kernel fetched is the lookup's best entry";
  auto again = launcher.kernel(softmax);
  ASSERT_TRUE(again);
  EXPECT_EQ(again->get(), k->get()) << "kept, not fetched again";
  EXPECT_EQ(launcher.size(), 1u);

  if (!cuda::CudaApi::get()) {
    auto r = ktune::softmax(launcher, 64, 4096, "bf16", 0x1000, 0x2000, nullptr);
    ASSERT_FALSE(r);
    EXPECT_NE(r.error().message.find("no CUDA driver"), std::string::npos) << r.error().message;
  }
}

// A model whose batch varies: every shape whose best entry is a config fetched before takes that
// Kernel's cubin (no kernel op: the same bytes, not a copy) and its module and workspaces; the
// map keeps the newest max_kernels() shapes.
TEST_F(LauncherTest, ShapesOfAConfigFetchedBeforeShareItsKernel) {
  Client c = client();
  Launcher launcher(c, k_h200);
  launcher.set_max_kernels(2);
  auto problem = [](std::int64_t m) {
    return protocol::ProblemSpec{"gemm", "bf16", "", "rc", {{"M", m}, {"N", 4096}, {"K", 4096}}};
  };
  std::vector<std::shared_ptr<Kernel>> kernels;
  for (std::int64_t m : {16, 8, 12}) {
    auto looked = c.lookup({problem(m), k_h200, 1});
    ASSERT_TRUE(looked);
    auto k = launcher.kernel(problem(m));
    ASSERT_TRUE(k) << k.error().message;
    EXPECT_EQ((*k)->description().cubin_id, looked->entries[0].launch["cubin_id"]);
    EXPECT_EQ((*k)->description().grid[0],
              looked->entries[0].launch["grid"][0].get<std::uint32_t>())
        << "the launch is this shape's";
    EXPECT_EQ((*k)->image().problem_key, looked->problem_key);
    kernels.push_back(std::move(*k));
  }
  ASSERT_EQ(kernels[0]->description().cubin_id, kernels[1]->description().cubin_id)
      << "the heuristic serves M = 16 and M = 8 one split-K config";
  EXPECT_EQ(kernels[1]->cubin().data(), kernels[0]->cubin().data()) << "shared, not fetched";
  EXPECT_TRUE(kernels[0]->image().cubin.empty()) << "the bytes are not kept twice";
  EXPECT_EQ(launcher.size(), 2u) << "the oldest shape went";
  std::set<std::string> ids;
  for (const auto& k : kernels) ids.insert(k->description().cubin_id);
  EXPECT_EQ(launcher.configs(), ids.size());
  auto again = launcher.kernel(problem(16));  // dropped: looked up again, its config held
  ASSERT_TRUE(again);
  EXPECT_NE(again->get(), kernels[0].get());
  EXPECT_EQ((*again)->cubin().data(), kernels[0]->cubin().data());
  EXPECT_EQ(launcher.size(), 2u);
}

TEST_F(LauncherTest, KernelErrorsComeBackTyped) {
  Client c = client();
  protocol::KernelRequest r{
      {"softmax", "bf16", "", "", {{"rows", 64}, {"cols", 4096}}}, k_h200, "nope", {}, "", ""};
  auto k = c.kernel(r);
  ASSERT_FALSE(k);
  EXPECT_EQ(k.error().kind, protocol::ErrorKind::not_found);
  EXPECT_NE(k.error().message.find("unknown template 'nope'"), std::string::npos);
}

TEST_F(LauncherTest, CliWritesTheCubinOfTheBestEntry) {
  const std::string cli = testing::ktune_cli_path() + " --socket " + m_daemon.socket();
  const std::string out = m_dir / "softmax.cubin";
  auto [rc, text] = run_command(cli + " kernel softmax --shape rows=64,cols=4096 --device " +
                                k_h200 + " -o " + out + " 2>&1");
  ASSERT_EQ(rc, 0) << text;
  EXPECT_NE(text.find("softmax"), std::string::npos) << text;
  std::ifstream in(out, std::ios::binary);
  std::stringstream bytes;
  bytes << in.rdbuf();
  auto info = inspect_cubin(bytes.str());
  ASSERT_TRUE(info) << info.error().message;
  EXPECT_EQ(info->sm, 90);
  // The file is the cubin of the lookup's best entry, as the Launcher fetches it.
  Client c = client();
  Launcher launcher(c, k_h200);
  auto best = launcher.kernel({"softmax", "bf16", "", "", {{"rows", 64}, {"cols", 4096}}});
  ASSERT_TRUE(best) << best.error().message;
  EXPECT_EQ(bytes.str(), (*best)->cubin());
  std::tie(rc, text) =
      run_command(cli + " kernel gemm --shape M=64,N=64,K=64 --device " + k_h200 +
                  " --template gemm --config BLOCK_M=48 -o " + (m_dir / "x.cubin") + " 2>&1");
  EXPECT_EQ(rc, 1) << text;
  EXPECT_NE(text.find("BLOCK_M = 48 is outside"), std::string::npos) << text;
}

// A free TCP port on 127.0.0.1.
int free_loopback_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  int port = 0;
  if (fd >= 0 && ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0)
    port = ntohs(a.sin_port);
  if (fd >= 0) ::close(fd);
  return port;
}

// Opens a connection to the Unix socket `path`, sends nothing and returns what the daemon writes
// before it closes it (its idle-close notice), or "" when it has not closed it by `deadline`.
std::string idle_close_notice(const std::string& path, Clock::time_point deadline) {
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  std::strncpy(a.sun_path, path.c_str(), sizeof a.sun_path - 1);
  std::string text;
  if (fd >= 0 && ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0) {
    char buf[4096];
    for (auto left = deadline - Clock::now(); left > Clock::duration::zero();
         left = deadline - Clock::now()) {
      pollfd p{fd, POLLIN, 0};
      if (::poll(&p, 1, int(std::chrono::ceil<std::chrono::milliseconds>(left).count())) <= 0)
        continue;
      const ssize_t n = ::read(fd, buf, sizeof buf);
      if (n == 0) break;  // closed: the notice is in `text`
      if (n < 0) {
        text.clear();
        break;
      }
      text.append(buf, size_t(n));
    }
    if (Clock::now() >= deadline) text.clear();
  }
  if (fd >= 0) ::close(fd);
  return text;
}

// A watch on a connection the daemon closed while it sat idle (longer than
// server.read_timeout_ms) reconnects and is answered, as every other call is; it failed at once,
// with the daemon's idle-close notice (TCP: the send succeeds, the notice is what comes back) or
// a broken pipe (Unix socket). The job is unknown: the daemon's own answer, not_found, shows the
// watch reached it.
TEST(ClientE2eTest, AWatchAfterTheDaemonClosedTheIdleConnectionReconnects) {
  TempDir dir;
  const int port = free_loopback_port();
  ASSERT_GT(port, 0);
  const std::string tcp = "127.0.0.1:" + std::to_string(port);
  // One I/O thread: the sessions' read deadlines are acted on in the order they fall.
  DaemonProcess daemon(dir / "ktuned.sock", dir / "data",
                       {"--set", "server.read_timeout_ms=300", "--set", "server.io_threads=1",
                        "--set", "server.tcp=" + tcp, "--set", "server.tcp_token=t0ken"});
  ASSERT_TRUE(daemon.start()) << "ktuned did not start";
  for (const bool over_tcp : {false, true}) {
    SCOPED_TRACE(over_tcp ? "tcp" : "unix socket");
    ClientOptions o;
    o.socket_path = daemon.socket();
    if (over_tcp) {
      o.tcp_address = tcp;
      o.token = "t0ken";
    }
    Client c(o);
    ASSERT_TRUE(c.status()) << "the connection is open";
    // A connection opened after c's last reply, once the daemon closed it as idle: c's, idle
    // since before it, has been closed too.
    const std::string notice =
        idle_close_notice(daemon.socket(), Clock::now() + std::chrono::seconds(10));
    ASSERT_NE(notice.find("\"timeout\""), std::string::npos)
        << "the daemon did not close an idle connection: " << notice;
    auto r = c.watch("nosuch", nullptr, std::chrono::seconds(5));
    ASSERT_FALSE(r);
    EXPECT_EQ(r.error().kind, protocol::ErrorKind::not_found) << r.error().message;
    EXPECT_NE(r.error().message.find("no job nosuch"), std::string::npos) << r.error().message;
  }
}

}  // namespace
}  // namespace ktune
