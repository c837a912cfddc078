// TelemetryWindow and summarize_telemetry: which reads a measurement's telemetry is made of, and
// how reads and summaries combine (no GPU: a fake source stands for NVML).
#include "tuner/telemetry_window.h"

#include <gtest/gtest.h>

#include <atomic>

#include "tests/fakes/eventually.h"
#include "tuner/worker_protocol.h"

namespace ktune {
namespace {

GpuTelemetry read_of(int sm_mhz, double power_w, std::uint64_t reasons = 0, int temperature = 50) {
  GpuTelemetry t;
  t.sm_clock_mhz = sm_mhz;
  t.mem_clock_mhz = 3200;
  t.power_w = power_w;
  t.utilization_percent = 100;
  t.temperature_c = temperature;
  t.clock_event_reasons = reasons;
  return t;
}

TEST(SummarizeTelemetryTest, MediansHottestEveryReasonAndTheCappedShare) {
  const GpuTelemetry s = summarize_telemetry({
      read_of(1980, 150, k_clock_event_gpu_idle, 40),
      read_of(1485, 690, k_clock_event_sw_power_cap, 61),
      read_of(1440, 700, k_clock_event_sw_power_cap | k_clock_event_hw_slowdown, 63),
      read_of(1500, 680, 0, 60),
  });
  EXPECT_EQ(s.samples, 4);
  EXPECT_EQ(s.sm_clock_mhz, (1485 + 1500) / 2);
  EXPECT_DOUBLE_EQ(s.power_w, (680.0 + 690.0) / 2);
  EXPECT_EQ(s.mem_clock_mhz, 3200);
  EXPECT_EQ(s.temperature_c, 63);
  EXPECT_EQ(s.clock_event_reasons,
            k_clock_event_gpu_idle | k_clock_event_sw_power_cap | k_clock_event_hw_slowdown);
  EXPECT_DOUBLE_EQ(s.power_capped_share, 0.5);
}

TEST(SummarizeTelemetryTest, ASummaryWeighsAsManyReadsAsItSummarizes) {
  GpuTelemetry capped = read_of(1440, 700, k_clock_event_sw_power_cap);
  capped.samples = 30;
  capped.power_capped_share = 0.9;
  GpuTelemetry free = read_of(1900, 400);
  free.samples = 10;
  free.power_capped_share = 0;
  const GpuTelemetry s = summarize_telemetry({capped, free});
  EXPECT_EQ(s.samples, 40);
  EXPECT_DOUBLE_EQ(s.power_capped_share, 27.0 / 40);
  EXPECT_EQ(summarize_telemetry({}).samples, 0);
  EXPECT_EQ(summarize_telemetry({}).sm_clock_mhz, 0);
}

// The counted clock of a summary (a re-time's rounds) is the median of the measurements that
// counted one; those that could not (0) are left out rather than pulling it down.
TEST(SummarizeTelemetryTest, TheCountedClockIsTheMedianOfTheCountedOnes) {
  std::vector<GpuTelemetry> reads = {read_of(1980, 150), read_of(1980, 690), read_of(1980, 700),
                                     read_of(1980, 690)};
  reads[0].sm_clock_counted_mhz = 1938;
  reads[1].sm_clock_counted_mhz = 1500;
  reads[2].sm_clock_counted_mhz = 1499;
  EXPECT_EQ(summarize_telemetry(reads).sm_clock_counted_mhz, 1500);
  EXPECT_EQ(summarize_telemetry({read_of(1980, 150)}).sm_clock_counted_mhz, 0);
}

TEST(SummarizeTelemetryTest, TheWorkerProtocolCarriesEveryField) {
  GpuTelemetry t = read_of(1755, 512.5, k_clock_event_sw_power_cap | k_clock_event_sw_thermal, 71);
  t.mem_clock_mhz = 2619;
  t.utilization_percent = 93;
  t.samples = 17;
  t.power_capped_share = 0.25;
  t.sm_clock_counted_mhz = 1417;
  EXPECT_EQ(telemetry_from_json(to_json(t)), t);
  EXPECT_EQ(telemetry_from_json(WorkerJson::object()), GpuTelemetry{});  // an older worker's reply
}

// The window keeps the reads of the span the caller names, the last before close(): reads taken
// before it (the GPU before the timed launches) are left out.
TEST(TelemetryWindowTest, KeepsOnlyTheReadsOfTheSpanBeforeClose) {
  std::atomic<int> phase{1};
  std::atomic<int> reads_before{0}, reads_during{0};
  TelemetryWindow window(
      [&]() -> std::optional<GpuTelemetry> {
        const bool during = phase.load() == 2;
        (during ? reads_during : reads_before)++;
        return read_of(during ? 1500 : 1980, during ? 690 : 150);
      },
      std::chrono::microseconds(500));
  ASSERT_TRUE(testing::eventually([&] { return reads_before.load() >= 3; }));
  phase = 2;
  // The span starts after a whole read of the second phase, so no read of the first is in it.
  ASSERT_TRUE(testing::eventually([&] { return reads_during.load() >= 1; }));
  const auto start = TelemetryWindow::Clock::now();
  const int during_at_start = reads_during.load();
  ASSERT_TRUE(testing::eventually([&] { return reads_during.load() >= during_at_start + 3; }));
  const auto span =
      std::chrono::duration_cast<std::chrono::microseconds>(TelemetryWindow::Clock::now() - start);
  const GpuTelemetry s = window.close(span);
  EXPECT_GE(s.samples, 2);
  EXPECT_LE(s.samples, reads_during.load());
  EXPECT_EQ(s.sm_clock_mhz, 1500);
  EXPECT_DOUBLE_EQ(s.power_w, 690);
}

TEST(TelemetryWindowTest, ASpanShorterThanThePeriodOrNoSourceGivesNoSamples) {
  std::atomic<int> reads{0};
  TelemetryWindow window(
      [&]() -> std::optional<GpuTelemetry> {
        ++reads;
        return read_of(1500, 690);
      },
      std::chrono::hours(1));
  ASSERT_TRUE(testing::eventually([&] { return reads.load() == 1; }));
  // The one read is older than a zero span ending now.
  EXPECT_EQ(window.close(std::chrono::microseconds(0)).samples, 0);
  EXPECT_EQ(reads.load(), 1);  // closing did not wait out the hour

  TelemetryWindow without_nvml({}, std::chrono::microseconds(100));
  EXPECT_EQ(without_nvml.close(std::chrono::hours(1)).samples, 0);
}

TEST(TelemetryWindowTest, FailedReadsAreNotSamples) {
  std::atomic<int> reads{0};
  TelemetryWindow window(
      [&]() -> std::optional<GpuTelemetry> {
        ++reads;
        return std::nullopt;
      },
      std::chrono::microseconds(200));
  ASSERT_TRUE(testing::eventually([&] { return reads.load() >= 3; }));
  EXPECT_EQ(window.close(std::chrono::hours(1)).samples, 0);
}

}  // namespace
}  // namespace ktune
