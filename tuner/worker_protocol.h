// The framed protocol between a tuning parent (ktuned, `ktune tune`, ktune-bench) and
// ktune-worker, the process that owns one GPU. docs/worker-protocol.md is the spec.
//
// A frame is: u32 LE header length | u32 LE blob length | header (JSON) | blob (cubin bytes).
// The parent sends one request and waits for one reply, with a deadline; a worker that misses
// it is SIGKILLed. Thread-compatible value types and free functions.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "config/error.h"
#include "store/records.h"
#include "templates/space.h"
#include "tuner/nvml.h"

namespace ktune {

using WorkerJson = nlohmann::json;

// 2: args carry a kind (buffer, scalar, tensor_map), buffers `pass`; launches a cluster; the
// `occupancy` op.
inline constexpr int k_worker_protocol_version = 3;  // 3: timing.l2 (docs/worker-protocol.md)
inline constexpr std::uint32_t k_max_worker_header = 16u << 20;
inline constexpr std::uint32_t k_max_worker_blob = 256u << 20;

struct WorkerFrame {
  WorkerJson header;
  std::string blob;
};

// Writes a whole frame (blocking). ErrorCode::unavailable when the peer is gone.
Result<void> write_worker_frame(int fd, const WorkerJson& header, std::string_view blob = {});

// Called first thing by a worker: it is killed when the process that spawned it dies (a
// SIGKILLed ktuned must not leave a worker spinning in a hung kernel, holding the GPU), and exits
// at once if that already happened.
void die_with_parent();
// Reads a whole frame. timeout_ms < 0: wait forever. ErrorCode::timeout on deadline,
// ErrorCode::unavailable on EOF (the peer died), ErrorCode::corruption on a bad frame.
Result<WorkerFrame> read_worker_frame(int fd, int timeout_ms);

// What L2 holds when a timed launch starts (docs/worker-protocol.md, "Timing") is a TimingL2
// (store/records.h), flushed or rotated: its names are the protocol's, the config key
// tuning.timing_l2's, and what trial and winner records say of their medians.

// How a candidate is timed. Defaults follow docs/worker-protocol.md § Measurement.
struct TimingOptions {
  double warmup_ms = 10;   // warm-up time before measuring (at least 2 launches)
  double target_ms = 100;  // measured time per candidate, spread over the samples
  int min_samples = 10;
  int max_samples = 200;
  double graph_below_us = 20;  // kernels faster than this are timed by CUDA graph replay
                               // (rotated only: a flushed launch is timed on its own)
  TimingL2 l2 = TimingL2::flushed;  // never unknown
};

struct TrialRequest {
  std::uint64_t id = 0;  // the parent's handle; the worker keeps the module for retime
  Params params;         // for logs (and fake workers in tests); the cubin is what runs
  std::string lowered_name;
  LaunchGeometry launch;
  std::vector<ArgValue> args;
  double tolerance = 0;
  bool verify = true;
  TimingOptions timing;
  // A finalist measured before (by an earlier worker or job), loaded again for the interleaved
  // re-timing. Informational, like params: the worker runs it as any trial.
  bool reload = false;
};

struct Timing {
  double median_us = 0;
  double p10_us = 0;
  double p90_us = 0;
  int samples = 0;
  bool graph = false;  // timed by graph replay
  double spread_pct() const { return median_us > 0 ? (p90_us - p10_us) / median_us * 100 : 0; }
};

struct TrialResult {
  std::uint64_t id = 0;
  Outcome outcome = Outcome::ok;
  Timing timing;
  double ref_error = 0;
  std::string message;
  GpuTelemetry telemetry;  // read while the timed launches ran (zeros without NVML)
};

WorkerJson to_json(const ArgValue& a);
Result<ArgValue> arg_from_json(const WorkerJson& j);
WorkerJson to_json(const LaunchGeometry& g);
LaunchGeometry launch_from_json(const WorkerJson& j);
WorkerJson to_json(const TimingOptions& t);
TimingOptions timing_options_from_json(const WorkerJson& j);
WorkerJson to_json(const TrialRequest& r);  // without the cubin (that is the blob)
Result<TrialRequest> trial_request_from_json(const WorkerJson& j);
WorkerJson to_json(const Timing& t);
Timing timing_from_json(const WorkerJson& j);
WorkerJson to_json(const TrialResult& r);
Result<TrialResult> trial_result_from_json(const WorkerJson& j);
WorkerJson to_json(const GpuTelemetry& t);
GpuTelemetry telemetry_from_json(const WorkerJson& j);

}  // namespace ktune
