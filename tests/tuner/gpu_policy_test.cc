// The idle rule (IdlePolicy) with an injected clock, and the file monitor that plays NVML in CI.
#include "tuner/gpu_policy.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

namespace ktune {
namespace {

using namespace std::chrono_literals;
using Clock = IdlePolicy::Clock;

const Clock::time_point k_t0 = Clock::time_point{} + 1000s;

GpuActivity activity(int utilization, std::vector<std::uint32_t> pids = {}) {
  return GpuActivity{utilization, std::move(pids)};
}

GpuPolicyOptions idle_options(double settle_s = 5) {
  return {
      .mode = GpuPolicyMode::idle, .threshold_percent = 5, .settle_s = settle_s, .poll_ms = 200};
}

const std::vector<std::uint32_t> k_no_own;

TEST(GpuPolicyMode, ParsesTheThreeModesAndRejectsOthers) {
  EXPECT_EQ(parse_gpu_policy_mode("idle"), GpuPolicyMode::idle);
  EXPECT_EQ(parse_gpu_policy_mode("always"), GpuPolicyMode::always);
  EXPECT_EQ(parse_gpu_policy_mode("never"), GpuPolicyMode::never);
  auto bad = parse_gpu_policy_mode("sometimes");
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().code, ErrorCode::invalid_argument);
  for (auto mode : {GpuPolicyMode::idle, GpuPolicyMode::always, GpuPolicyMode::never})
    EXPECT_EQ(parse_gpu_policy_mode(to_string(mode)), mode);
}

TEST(GpuPolicyMode, OptionsComeFromTheConfigKeys) {
  DaemonConfig config;
  config.gpu_policy = "always";
  config.idle_threshold_percent = 12;
  config.idle_settle_seconds = 3;
  config.idle_poll_ms = 50;
  auto options = gpu_policy_options(config);
  ASSERT_TRUE(options);
  EXPECT_EQ(options->mode, GpuPolicyMode::always);
  EXPECT_EQ(options->threshold_percent, 12);
  EXPECT_EQ(options->settle_s, 3);
  EXPECT_EQ(options->poll_ms, 50);
}

TEST(IdlePolicy, QuietGpuIsAllowedOnlyAfterTheSettleTime) {
  IdlePolicy policy(idle_options());
  auto d = policy.observe(activity(0), k_no_own, k_t0);
  EXPECT_FALSE(d.allowed);
  EXPECT_EQ(d.reason, "settling: idle for 0.0 s of 5 s");
  d = policy.observe(activity(3), k_no_own, k_t0 + 1200ms);
  EXPECT_FALSE(d.allowed);
  EXPECT_EQ(d.reason, "settling: idle for 1.2 s of 5 s");
  d = policy.observe(activity(5), k_no_own, k_t0 + 5s);  // at the threshold is quiet
  EXPECT_TRUE(d.allowed);
  EXPECT_EQ(d.reason, "idle: utilization 5% <= 5%");
}

TEST(IdlePolicy, ForeignProcessPausesAtOnceAndItsDepartureRestartsTheSettleTime) {
  IdlePolicy policy(idle_options());
  policy.observe(activity(0), k_no_own, k_t0);
  ASSERT_TRUE(policy.observe(activity(0), k_no_own, k_t0 + 6s).allowed);

  auto d = policy.observe(activity(0, {1234}), k_no_own, k_t0 + 6200ms);
  EXPECT_FALSE(d.allowed);
  EXPECT_EQ(d.reason, "foreign process 1234 on GPU");
  d = policy.observe(activity(90, {5678, 1234, 5678}), k_no_own, k_t0 + 6400ms);
  EXPECT_EQ(d.reason, "foreign processes 1234, 5678 on GPU");

  // Gone: quiet again, but allowed only once the settle time has passed since it left.
  d = policy.observe(activity(0), k_no_own, k_t0 + 10s);
  EXPECT_FALSE(d.allowed);
  EXPECT_EQ(d.reason, "settling: idle for 0.0 s of 5 s");
  EXPECT_FALSE(policy.observe(activity(0), k_no_own, k_t0 + 14900ms).allowed);
  EXPECT_TRUE(policy.observe(activity(0), k_no_own, k_t0 + 15s).allowed);
}

TEST(IdlePolicy, BusyBlipDuringTheSettleTimeStartsItAgain) {
  IdlePolicy policy(idle_options());
  policy.observe(activity(0), k_no_own, k_t0);
  EXPECT_FALSE(policy.observe(activity(60), k_no_own, k_t0 + 4s).allowed);
  EXPECT_FALSE(policy.observe(activity(0), k_no_own, k_t0 + 5s).allowed);
  EXPECT_FALSE(policy.observe(activity(0), k_no_own, k_t0 + 9900ms).allowed);
  EXPECT_TRUE(policy.observe(activity(0), k_no_own, k_t0 + 10s).allowed);
}

TEST(IdlePolicy, OwnWorkerIsNotForeignAndItsUtilizationIsIgnored) {
  IdlePolicy policy(idle_options(0));
  const std::vector<std::uint32_t> own = {777};
  auto d = policy.observe(activity(100, {777}), own, k_t0);
  EXPECT_TRUE(d.allowed);
  EXPECT_EQ(d.reason, "idle: only ktune's workers on GPU");
  // A foreign process beside our worker still pauses.
  d = policy.observe(activity(100, {777, 1234}), own, k_t0 + 1s);
  EXPECT_FALSE(d.allowed);
  EXPECT_EQ(d.reason, "foreign process 1234 on GPU");
  // Our pid known but not on the GPU: utilization counts again.
  d = policy.observe(activity(37), own, k_t0 + 2s);
  EXPECT_FALSE(d.allowed);
  EXPECT_EQ(d.reason, "utilization 37% > 5%");
}

TEST(IdlePolicy, UtilizationOverTheThresholdWithNoVisibleProcessIsBusy) {
  IdlePolicy policy(idle_options(0));
  auto d = policy.observe(activity(37), k_no_own, k_t0);
  EXPECT_FALSE(d.allowed);
  EXPECT_EQ(d.reason, "utilization 37% > 5%");
  EXPECT_TRUE(policy.observe(activity(4), k_no_own, k_t0 + 1s).allowed);
}

TEST(IdlePolicy, SamplingErrorIsBusyWithTheReasonAndRestartsTheSettleTime) {
  IdlePolicy policy(idle_options(1));
  policy.observe(activity(0), k_no_own, k_t0);
  ASSERT_TRUE(policy.observe(activity(0), k_no_own, k_t0 + 1s).allowed);
  Result<GpuActivity> error = fail(ErrorCode::unavailable, "no NVML: libnvidia-ml.so.1 missing");
  auto d = policy.observe(error, k_no_own, k_t0 + 2s);
  EXPECT_FALSE(d.allowed);
  EXPECT_EQ(d.reason, "NVML unavailable: no NVML: libnvidia-ml.so.1 missing");
  EXPECT_FALSE(policy.observe(activity(0), k_no_own, k_t0 + 3s).allowed);
  EXPECT_TRUE(policy.observe(activity(0), k_no_own, k_t0 + 4s).allowed);
}

TEST(IdlePolicy, AlwaysAndNeverIgnoreTheGpu) {
  IdlePolicy always({.mode = GpuPolicyMode::always});
  auto d = always.observe(activity(100, {1234}), k_no_own, k_t0);
  EXPECT_TRUE(d.allowed);
  EXPECT_EQ(d.reason, "policy always");
  IdlePolicy never({.mode = GpuPolicyMode::never});
  for (int i = 0; i < 3; ++i) {
    d = never.observe(activity(0), k_no_own, k_t0 + i * 10s);
    EXPECT_FALSE(d.allowed);
    EXPECT_EQ(d.reason, "policy never");
  }
}

// ---- the file monitor ----

class FileMonitorTest : public ::testing::Test {
 protected:
  FileMonitorTest()
      : m_dir(std::filesystem::temp_directory_path() /
              ("ktune-file-monitor-" + std::to_string(::getpid()))) {
    std::filesystem::remove_all(m_dir);
    std::filesystem::create_directories(m_dir);
    m_monitor = make_file_monitor(m_dir.string());
  }
  ~FileMonitorTest() override { std::filesystem::remove_all(m_dir); }

  void write(int ordinal, const std::string& text) {
    std::ofstream(m_dir / ("gpu" + std::to_string(ordinal) + ".json")) << text;
  }

  std::filesystem::path m_dir;
  std::unique_ptr<GpuMonitor> m_monitor;
};

TEST_F(FileMonitorTest, MissingFileIsAnIdleGpu) {
  auto a = m_monitor->sample(0, "0000:3B:00.0");
  ASSERT_TRUE(a) << a.error().message;
  EXPECT_EQ(a->utilization_percent, 0);
  EXPECT_TRUE(a->compute_pids.empty());
  EXPECT_EQ(m_monitor->describe(), "fake NVML files in " + m_dir.string());
}

TEST_F(FileMonitorTest, ReadsEachGpusFileOnEverySample) {
  write(1, R"({"utilization": 37, "pids": [1234, 5678]})");
  auto a = m_monitor->sample(1, "");
  ASSERT_TRUE(a) << a.error().message;
  EXPECT_EQ(a->utilization_percent, 37);
  EXPECT_EQ(a->compute_pids, (std::vector<std::uint32_t>{1234, 5678}));
  EXPECT_TRUE(m_monitor->sample(0, "")->compute_pids.empty());  // gpu0.json is not there

  write(1, R"({"utilization": 2})");
  a = m_monitor->sample(1, "");
  ASSERT_TRUE(a) << a.error().message;
  EXPECT_EQ(a->utilization_percent, 2);
  EXPECT_TRUE(a->compute_pids.empty());
}

TEST_F(FileMonitorTest, MalformedFileIsAnError) {
  for (const char* text : {"{", "[]", R"({"utilization": "high"})", R"({"utilization": 101})",
                           R"({"pids": [-1]})", R"({"pids": 5})", R"({"pid": [5]})"}) {
    write(0, text);
    auto a = m_monitor->sample(0, "");
    ASSERT_FALSE(a) << text;
    EXPECT_EQ(a.error().code, ErrorCode::corruption) << text;
    EXPECT_NE(a.error().message.find("gpu0.json"), std::string::npos) << a.error().message;
  }
}

TEST(GpuMonitor, UnavailableMonitorFailsEverySampleWithItsReason) {
  auto monitor = make_unavailable_monitor(Error{ErrorCode::unavailable, "no NVML"});
  auto a = monitor->sample(0, "");
  ASSERT_FALSE(a);
  EXPECT_EQ(a.error().message, "no NVML");
}

TEST(GpuMonitor, FakeDirectoryVariablePicksTheFileMonitor) {
  ::setenv("KTUNE_FAKE_NVML_DIR", "/nonexistent/ktune-fake", 1);
  auto monitor = make_gpu_monitor();
  ::unsetenv("KTUNE_FAKE_NVML_DIR");
  ASSERT_TRUE(monitor) << monitor.error().message;
  EXPECT_EQ((*monitor)->describe(), "fake NVML files in /nonexistent/ktune-fake");
}

}  // namespace
}  // namespace ktune
