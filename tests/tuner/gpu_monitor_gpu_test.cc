// GPU test (ctest label "gpu"): the NVML monitor on a real driver sees a ktune-worker's compute
// context by pid, and the idle policy counts that worker as ktune's own. Skips without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>

#include "tuner/cuda_driver.h"
#include "tuner/gpu_policy.h"
#include "tuner/worker_process.h"

namespace ktune {
namespace {

std::string pid_list(const std::vector<std::uint32_t>& pids) {
  std::string s;
  for (auto pid : pids) s += (s.empty() ? "" : ",") + std::to_string(pid);
  return "[" + s + "]";
}

TEST(GpuMonitorGpuTest, NvmlSeesTheWorkerAndThePolicyCountsItAsOwn) {
  auto gpus = query_gpus();
  if (!gpus) GTEST_SKIP() << gpus.error().message;
  auto monitor = make_nvml_monitor();
  ASSERT_TRUE(monitor) << monitor.error().message;  // a driver without NVML would be a surprise
  const GpuInfo& gpu = gpus->front();

  const auto t0 = std::chrono::steady_clock::now();
  auto before = (*monitor)->sample(gpu.ordinal, gpu.pci_bus_id);
  const double sample_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_TRUE(before) << before.error().message;
  std::printf("%s, GPU %s: before the worker: utilization %d%%, pids %s (sample took %.2f ms)\n",
              (*monitor)->describe().c_str(), gpu.pci_bus_id.c_str(), before->utilization_percent,
              pid_list(before->compute_pids).c_str(), sample_ms);

  auto worker = WorkerProcess::spawn(default_worker_binary(), gpu.ordinal);
  ASSERT_TRUE(worker) << worker.error().message;  // its hello comes after its context exists
  const auto worker_pid = std::uint32_t((*worker)->pid());
  auto during = (*monitor)->sample(gpu.ordinal, gpu.pci_bus_id);
  ASSERT_TRUE(during) << during.error().message;
  std::printf("with worker %u: utilization %d%%, pids %s\n", worker_pid,
              during->utilization_percent, pid_list(during->compute_pids).c_str());
  const auto& pids = during->compute_pids;
  EXPECT_NE(std::find(pids.begin(), pids.end(), worker_pid), pids.end())
      << "NVML does not list the worker: in a container without the host's pid namespace the "
         "idle policy cannot tell ktune's own work from foreign work";

  IdlePolicy policy({.mode = GpuPolicyMode::idle, .threshold_percent = 5, .settle_s = 0});
  const std::vector<std::uint32_t> own = {worker_pid};
  const GpuDecision d = policy.observe(during, own, std::chrono::steady_clock::now());
  std::printf("idle policy with the worker as own: %s (%s)\n", d.allowed ? "allowed" : "paused",
              d.reason.c_str());
  EXPECT_EQ(d.reason.find(std::to_string(worker_pid)), std::string::npos) << d.reason;
}

}  // namespace
}  // namespace ktune
