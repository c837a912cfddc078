// fake-worker: speaks ktune-worker's protocol without a GPU, misbehaving on purpose so the
// parent's fault handling is tested in CI. A trial's behaviour comes from its MODE param (the
// tests/data/templates/fault template):
//   0: ok, median 10 + THREADS/100 us     1: replies "crash", exits 3 (a sticky CUDA error)
//   2: hangs (a kernel that never ends)   3: replies resource_error
//   4: exits without a reply (the process died)
// Environment, for tests that watch or slow it down:
//   FAKE_WORKER_LOG=path     appends one line per measured trial (modes 0 and 3; not finalists
//                            loaded again for re-timing): its params, "MODE=0,THREADS=128"
//   FAKE_WORKER_DELAY_MS=n   sleeps n ms at the start of every trial (slow jobs to kill mid-way)
//   FAKE_WORKER_HANG_LOG=path  appends a mode-2 trial's params as it starts to hang
//   FAKE_WORKER_NONFINITE=1  mode 4 replies wrong_result with outputs that were not finite (the
//                            real worker's +inf reference error) instead of exiting
//   FAKE_WORKER_PROTOCOL=n   says protocol n in its hello (default: this build's)
//   FAKE_WORKER_CLUSTERS=n   answers every `occupancy` request with n (default 132 / cluster size)
//   FAKE_WORKER_RETIME_LOG=path  appends "rounds=R finalists=F l2=S" for every retime request (S:
//                                its timing's L2 state, as the real worker would time)
// A logged line ends with " grid=X,Y,Z cluster=X,Y,Z" when FAKE_WORKER_LOG_LAUNCH is set.
// An ok trial's message is "fake measurement <n>", n counting the ok trials this process ran.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <map>
#include <string>
#include <thread>

#include "tuner/worker_protocol.h"

using namespace ktune;

namespace {

// One line to the file the environment variable `var` names, appended with a single write so
// lines of successive workers never interleave.
void log_line(const char* var, const std::string& line) {
  const char* path = std::getenv(var);
  if (!path || !*path) return;
  const int fd = ::open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) return;
  const std::string text = line + "\n";
  (void)!::write(fd, text.data(), text.size());
  ::close(fd);
}

void log_trial(const Params& params, const std::string& suffix) {
  log_line("FAKE_WORKER_LOG", params_to_string(params) + suffix);
}

}  // namespace

int main(int argc, char** argv) {
  die_with_parent();
  int fd = -1;
  for (int i = 1; i + 1 < argc; ++i)
    if (std::strcmp(argv[i], "--fd") == 0) fd = std::atoi(argv[i + 1]);
  if (fd < 0) return 2;
  const char* delay = std::getenv("FAKE_WORKER_DELAY_MS");
  const int delay_ms = delay ? std::atoi(delay) : 0;
  int measured = 0;
  std::map<std::uint64_t, double> medians;
  while (true) {
    auto frame = read_worker_frame(fd, -1);
    if (!frame) return 0;
    const WorkerJson& h = frame->header;
    const std::string op = h.value("op", "");
    WorkerJson reply = {{"ok", true}};
    if (op == "hello") {
      reply["device"] = {{"name", "Fake GPU"}, {"cc", 90}, {"sm_count", 132}, {"memory_gib", 80}};
      reply["pid"] = ::getpid();
      const char* protocol = std::getenv("FAKE_WORKER_PROTOCOL");
      reply["protocol"] = protocol ? std::atoi(protocol) : k_worker_protocol_version;
    } else if (op == "occupancy") {
      const LaunchGeometry g = launch_from_json(h.at("launch"));
      const char* clusters = std::getenv("FAKE_WORKER_CLUSTERS");
      reply["max_active_clusters"] =
          clusters ? std::atoi(clusters) : int(132 / std::max(1u, g.cluster_size()));
      reply["message"] = reply["max_active_clusters"] == 0 ? "no cluster fits" : "";
    } else if (op == "shutdown") {
      return 0;
    } else if (op == "trial") {
      if (delay_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
      const std::int64_t mode = h["params"].value("MODE", 0),
                         threads = h["params"].value("THREADS", 128);
      Params params;
      for (auto it = h["params"].begin(); it != h["params"].end(); ++it)
        params[it.key()] = it.value().get<std::int64_t>();
      TrialResult r;
      r.id = h.at("id").get<std::uint64_t>();
      if (mode == 1) {
        r.outcome = Outcome::crash;
        r.message = "CUDA_ERROR_ILLEGAL_ADDRESS: an illegal memory access was encountered";
        WorkerJson j = to_json(r);
        j["ok"] = true;
        j["poisoned"] = true;
        (void)write_worker_frame(fd, j);
        std::_Exit(3);
      }
      if (mode == 2) {
        log_line("FAKE_WORKER_HANG_LOG", params_to_string(params));
        ::sleep(3600);
      }
      if (mode == 4 && !std::getenv("FAKE_WORKER_NONFINITE")) std::_Exit(1);
      if (mode == 4) {
        r.outcome = Outcome::wrong_result;
        r.ref_error = std::numeric_limits<double>::infinity();
        r.message = "y: 2048 of 4096 elements NaN/inf or never written";
      } else if (mode == 3) {
        r.outcome = Outcome::resource_error;
        r.message = "CUDA_ERROR_INVALID_VALUE: shared memory request refused";
      } else {
        r.timing.median_us = r.timing.p10_us = r.timing.p90_us = 10.0 + double(threads) / 100.0;
        r.timing.samples = 10;
        r.telemetry.sm_clock_mhz = 1400 + threads;  // as the real worker reads NVML while timing
        r.telemetry.power_w = 300.0 + double(threads) / 10.0;
        r.telemetry.sm_clock_counted_mhz = 1390 + threads;  // counted in-kernel after the timing
        r.telemetry.mem_clock_mhz = 2619;                   // an H100's HBM3
        r.message = "fake measurement " + std::to_string(++measured);
        medians[r.id] = r.timing.median_us;
      }
      if (!h.value("reload", false)) {
        std::string launch;
        if (std::getenv("FAKE_WORKER_LOG_LAUNCH")) {
          const LaunchGeometry g = launch_from_json(h.at("launch"));
          launch = " grid=" + std::to_string(g.grid[0]) + "," + std::to_string(g.grid[1]) + "," +
                   std::to_string(g.grid[2]) + " cluster=" + std::to_string(g.cluster[0]) + "," +
                   std::to_string(g.cluster[1]) + "," + std::to_string(g.cluster[2]);
        }
        log_trial(params, launch);
      }
      reply = to_json(r);
      reply["ok"] = true;
    } else if (op == "retime") {
      const TimingOptions timing =
          timing_options_from_json(h.value("timing", WorkerJson::object()));
      log_line("FAKE_WORKER_RETIME_LOG", "rounds=" + std::to_string(h.value("rounds", 0)) +
                                             " finalists=" + std::to_string(h.at("ids").size()) +
                                             " l2=" + std::string(to_string(timing.l2)));
      reply["times"] = WorkerJson::array();
      for (auto id : h.at("ids").get<std::vector<std::uint64_t>>()) {
        if (!medians.count(id)) {  // as the real worker: only what this process ran
          reply = {{"ok", false},
                   {"error", "retime: trial " + std::to_string(id) + " is not loaded"}};
          break;
        }
        Timing t;
        t.median_us = t.p10_us = t.p90_us = medians[id];
        WorkerJson j = to_json(t);
        j["id"] = id;
        reply["times"].push_back(j);
      }
    }
    if (!write_worker_frame(fd, reply)) return 0;
  }
}
