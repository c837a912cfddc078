// GpuGate end to end: a real sampling thread over the file monitor, foreign work played by
// writing the monitor's file. Nothing sleeps to synchronise: the tests wait on sample counts and
// futures with deadlines.
#include "tuner/gpu_gate.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <future>

namespace ktune {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

// The file monitor, counting completed samples so a test can wait for the gate to have looked.
class CountingMonitor final : public GpuMonitor {
 public:
  explicit CountingMonitor(const std::string& dir) : m_inner(make_file_monitor(dir)) {}

  Result<GpuActivity> sample(int ordinal, const std::string& pci_bus_id) override {
    auto activity = m_inner->sample(ordinal, pci_bus_id);
    {
      std::lock_guard lock(m_mutex);
      ++m_count;
    }
    m_cv.notify_all();
    return activity;
  }
  std::string describe() const override { return m_inner->describe(); }

  std::uint64_t count() const {
    std::lock_guard lock(m_mutex);
    return m_count;
  }
  // Waits until `n` samples have completed; false at the deadline.
  bool wait_for_count(std::uint64_t n, std::chrono::milliseconds timeout) {
    std::unique_lock lock(m_mutex);
    return m_cv.wait_for(lock, timeout, [&] { return m_count >= n; });
  }
  // Returns once the gate has applied a sample taken entirely after this call: the sample in
  // flight now may predate the caller's change, the next one does not, and its decision is
  // applied before the one after it starts.
  bool wait_for_fresh_decision(std::chrono::milliseconds timeout) {
    return wait_for_count(count() + 3, timeout);
  }

 private:
  std::unique_ptr<GpuMonitor> m_inner;
  mutable std::mutex m_mutex;
  std::condition_variable m_cv;
  std::uint64_t m_count = 0;
};

// A fresh directory for the monitor's files, removed afterwards.
struct TempDir {
  TempDir()
      : path(std::filesystem::temp_directory_path() /
             ("ktune-gpu-gate-" + std::to_string(::getpid()))) {
    std::filesystem::remove_all(path);
    std::filesystem::create_directories(path);
  }
  ~TempDir() { std::filesystem::remove_all(path); }
  std::filesystem::path path;
};

class GpuGateTest : public ::testing::Test {
 protected:
  GpuGateTest() : m_monitor(m_temp.path.string()) {}

  // Atomically, as the file monitor asks: a sample never sees half a file.
  void write_gpu0(const std::string& text) {
    const auto tmp = m_dir / "gpu0.json.tmp";
    std::ofstream(tmp) << text;
    std::filesystem::rename(tmp, m_dir / "gpu0.json");
  }
  void clear_gpu0() { std::filesystem::remove(m_dir / "gpu0.json"); }

  static GpuPolicyOptions options(GpuPolicyMode mode = GpuPolicyMode::idle, int poll_ms = 50) {
    return {.mode = mode, .threshold_percent = 5, .settle_s = 0.1, .poll_ms = poll_ms};
  }

  TempDir m_temp;
  const std::filesystem::path& m_dir = m_temp.path;
  CountingMonitor m_monitor;
};

TEST_F(GpuGateTest, AcquireReturnsPromptlyOnAnIdleGpu) {
  GpuGate gate(options(), m_monitor, 0, "0000:3B:00.0", {});
  EXPECT_FALSE(gate.state().allowed);
  EXPECT_EQ(gate.state().reason, "waiting for the first sample");
  const auto t0 = Clock::now();  // before start(): the first sample may come at once
  gate.start();
  auto acquired = std::async(std::launch::async, [&] { return gate.acquire(); });
  ASSERT_EQ(acquired.wait_for(5s), std::future_status::ready);
  EXPECT_TRUE(acquired.get());
  EXPECT_GE(Clock::now() - t0, 100ms);  // the settle time
  const GateState s = gate.state();
  EXPECT_TRUE(s.allowed);
  EXPECT_EQ(s.reason, "idle: utilization 0% <= 5%");
  EXPECT_EQ(gate.disturbance(), 0u);
}

TEST_F(GpuGateTest, ForeignWorkPausesTheGateAndItsDepartureResumesItAfterTheSettleTime) {
  GpuGate gate(options(), m_monitor, 0, "", {});
  gate.start();
  ASSERT_TRUE(gate.acquire());

  write_gpu0(R"({"utilization": 80, "pids": [4321]})");
  ASSERT_TRUE(m_monitor.wait_for_fresh_decision(1s));
  GateState s = gate.state();
  EXPECT_FALSE(s.allowed);
  EXPECT_EQ(s.reason, "foreign process 4321 on GPU");
  EXPECT_EQ(gate.disturbance(), 1u);

  auto acquired = std::async(std::launch::async, [&] { return gate.acquire(); });
  EXPECT_EQ(acquired.wait_for(150ms), std::future_status::timeout);  // blocked while paused

  const auto left = Clock::now();  // before the file goes: a sample may read it at once
  clear_gpu0();
  ASSERT_EQ(acquired.wait_for(5s), std::future_status::ready);
  EXPECT_TRUE(acquired.get());
  EXPECT_GE(Clock::now() - left, 100ms);  // not before the settle time
  EXPECT_EQ(gate.disturbance(), 1u);
  const GateTimes t = gate.times();
  EXPECT_GT(t.allowed_s, 0);
  EXPECT_GE(t.paused_s, 0.1 + 0.1);  // the first settle and the second
}

TEST_F(GpuGateTest, OwnWorkerAtFullUtilizationKeepsTheGateOpen) {
  // Driven by sample_now() alone: no thread.
  std::atomic<std::uint32_t> worker_pid{0};
  GpuPolicyOptions o = options();
  o.settle_s = 0;
  GpuGate gate(o, m_monitor, 0, "", [&] {
    std::vector<std::uint32_t> own;
    if (std::uint32_t pid = worker_pid.load()) own.push_back(pid);
    return own;
  });
  write_gpu0(R"({"utilization": 100, "pids": [4321]})");
  gate.sample_now();
  EXPECT_FALSE(gate.allowed());
  EXPECT_EQ(gate.state().reason, "foreign process 4321 on GPU");
  worker_pid = 4321;  // the lane's worker
  gate.sample_now();
  EXPECT_TRUE(gate.allowed());
  EXPECT_EQ(gate.state().reason, "idle: only ktune's workers on GPU");
  EXPECT_EQ(gate.disturbance(), 0u);
}

TEST_F(GpuGateTest, MonitorErrorPausesWithTheReason) {
  GpuPolicyOptions o = options();
  o.settle_s = 0;
  GpuGate gate(o, m_monitor, 0, "", {});
  gate.sample_now();
  ASSERT_TRUE(gate.allowed());
  write_gpu0("{not json");
  gate.sample_now();
  const GateState s = gate.state();
  EXPECT_FALSE(s.allowed);
  EXPECT_EQ(s.reason.rfind("NVML unavailable: ", 0), 0u) << s.reason;
  EXPECT_EQ(gate.disturbance(), 1u);
}

TEST_F(GpuGateTest, AlwaysDoesNotSampleAndNeverBlocks) {
  GpuGate gate(options(GpuPolicyMode::always), m_monitor, 0, "", {});
  gate.start();
  write_gpu0(R"({"utilization": 100, "pids": [4321]})");
  EXPECT_TRUE(gate.acquire());
  gate.sample_now();
  EXPECT_TRUE(gate.acquire());
  EXPECT_EQ(gate.state().reason, "policy always");
  EXPECT_EQ(m_monitor.count(), 0u);
}

TEST_F(GpuGateTest, NeverBlocksUntilCancelled) {
  GpuGate gate(options(GpuPolicyMode::never), m_monitor, 0, "", {});
  gate.start();
  std::atomic<bool> cancel{false};
  auto acquired =
      std::async(std::launch::async, [&] { return gate.acquire([&] { return cancel.load(); }); });
  EXPECT_EQ(acquired.wait_for(100ms), std::future_status::timeout);
  EXPECT_EQ(gate.state().reason, "policy never");
  cancel = true;
  ASSERT_EQ(acquired.wait_for(1s), std::future_status::ready);  // re-checked every 50 ms
  EXPECT_FALSE(acquired.get());
}

TEST_F(GpuGateTest, StopWakesAcquireAtOnceEvenWithALongPollPeriod) {
  GpuGate gate(options(GpuPolicyMode::idle, /*poll_ms=*/60'000), m_monitor, 0, "", {});
  write_gpu0(R"({"pids": [4321]})");
  gate.start();
  ASSERT_TRUE(m_monitor.wait_for_count(1, 5s));  // the thread is now waiting out its period
  auto acquired = std::async(std::launch::async, [&] { return gate.acquire(); });
  EXPECT_EQ(acquired.wait_for(50ms), std::future_status::timeout);
  const auto t0 = Clock::now();
  gate.stop();
  EXPECT_LT(Clock::now() - t0, 5s);  // not the 60 s period
  ASSERT_EQ(acquired.wait_for(5s), std::future_status::ready);
  EXPECT_FALSE(acquired.get());
  EXPECT_FALSE(gate.acquire());  // stopped stays stopped
}

}  // namespace
}  // namespace ktune
