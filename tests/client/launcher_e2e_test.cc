// The launch path end to end against a real ktuned, without a GPU: the Launcher looks a shape up
// (v2), fetches its cubin with the kernel op, checks it and keeps it; `ktune kernel` writes a
// cubin to a file. Only the launch itself needs a driver (see kernel_gpu_test.cc). Label "e2e".
#include <gtest/gtest.h>

#include <fstream>
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
  EXPECT_EQ(bytes.str(), (*best)->image().cubin);
  std::tie(rc, text) =
      run_command(cli + " kernel gemm --shape M=64,N=64,K=64 --device " + k_h200 +
                  " --template gemm --config BLOCK_M=48 -o " + (m_dir / "x.cubin") + " 2>&1");
  EXPECT_EQ(rc, 1) << text;
  EXPECT_NE(text.find("BLOCK_M = 48 is outside"), std::string::npos) << text;
}

}  // namespace
}  // namespace ktune
