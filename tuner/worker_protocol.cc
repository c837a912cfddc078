#include "tuner/worker_protocol.h"

#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <cstdlib>

#include <poll.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <stdexcept>

namespace ktune {
namespace {

using Clock = std::chrono::steady_clock;

Result<void> write_all(int fd, const char* data, size_t size) {
  while (size > 0) {
    const ssize_t n = ::write(fd, data, size);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0)
      return fail(ErrorCode::unavailable,
                  std::string("worker pipe write: ") + std::strerror(errno));
    data += n;
    size -= size_t(n);
  }
  return {};
}

Result<void> read_all(int fd, char* data, size_t size, Clock::time_point deadline, bool forever) {
  while (size > 0) {
    if (!forever) {
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
      if (left <= 0) return fail(ErrorCode::timeout, "worker did not answer in time");
      pollfd p{fd, POLLIN, 0};
      const int r = ::poll(&p, 1, int(left));
      if (r < 0 && errno == EINTR) continue;
      if (r == 0) return fail(ErrorCode::timeout, "worker did not answer in time");
    }
    const ssize_t n = ::read(fd, data, size);
    if (n < 0 && errno == EINTR) continue;
    if (n == 0) return fail(ErrorCode::unavailable, "worker closed the pipe (exited)");
    if (n < 0)
      return fail(ErrorCode::unavailable, std::string("worker pipe read: ") + std::strerror(errno));
    data += n;
    size -= size_t(n);
  }
  return {};
}

std::uint32_t le32(const unsigned char* b) {
  return std::uint32_t(b[0]) | (std::uint32_t(b[1]) << 8) | (std::uint32_t(b[2]) << 16) |
         (std::uint32_t(b[3]) << 24);
}

}  // namespace

Result<void> write_worker_frame(int fd, const WorkerJson& header, std::string_view blob) {
  const std::string h = header.dump();
  unsigned char prefix[8];
  const std::uint32_t hl = std::uint32_t(h.size()), bl = std::uint32_t(blob.size());
  for (int i = 0; i < 4; ++i) {
    prefix[i] = static_cast<unsigned char>(hl >> (8 * i));
    prefix[4 + i] = static_cast<unsigned char>(bl >> (8 * i));
  }
  if (auto ok = write_all(fd, reinterpret_cast<const char*>(prefix), 8); !ok) return ok;
  if (auto ok = write_all(fd, h.data(), h.size()); !ok) return ok;
  return write_all(fd, blob.data(), blob.size());
}

Result<WorkerFrame> read_worker_frame(int fd, int timeout_ms) {
  const bool forever = timeout_ms < 0;
  const auto deadline = Clock::now() + std::chrono::milliseconds(forever ? 0 : timeout_ms);
  unsigned char prefix[8];
  if (auto ok = read_all(fd, reinterpret_cast<char*>(prefix), 8, deadline, forever); !ok)
    return std::unexpected(ok.error());
  const std::uint32_t hl = le32(prefix), bl = le32(prefix + 4);
  if (hl > k_max_worker_header || bl > k_max_worker_blob)
    return fail(ErrorCode::corruption, "worker frame too large");
  std::string h(hl, '\0');
  WorkerFrame frame;
  frame.blob.resize(bl);
  if (auto ok = read_all(fd, h.data(), hl, deadline, forever); !ok)
    return std::unexpected(ok.error());
  if (auto ok = read_all(fd, frame.blob.data(), bl, deadline, forever); !ok)
    return std::unexpected(ok.error());
  try {
    frame.header = WorkerJson::parse(h);
  } catch (const std::exception& e) {
    return fail(ErrorCode::corruption, std::string("worker frame header: ") + e.what());
  }
  return frame;
}

WorkerJson to_json(const ArgValue& a) {
  WorkerJson j = {{"name", a.name}, {"kind", std::string(to_string(a.kind))}};
  switch (a.kind) {
    case ArgKind::buffer:
      j["role"] = std::string(to_string(a.role));
      j["dtype"] = a.dtype;
      j["count"] = a.count;
      j["init"] = {{"kind", a.init.kind == InitSpec::Kind::uniform ? "uniform" : "normal"},
                   {"a", a.init.a},
                   {"b", a.init.b}};
      j["pass"] = a.pass;
      break;
    case ArgKind::scalar:
      j["scalar"] = std::string(to_string(a.scalar));
      j["value"] = a.value;
      break;
    case ArgKind::tensor_map:
      j["buffer"] = a.map.buffer;
      j["dtype"] = a.dtype;
      j["dims"] = a.map.dims;
      j["strides"] = a.map.strides;
      j["box"] = a.map.box;
      j["element_strides"] = a.map.element_strides;
      j["swizzle"] = std::string(to_string(a.map.swizzle));
      j["l2_promotion"] = std::string(to_string(a.map.l2_promotion));
      j["oob_fill"] = std::string(to_string(a.map.oob_fill));
      break;
  }
  return j;
}

namespace {

// Throws on an unknown spelling (arg_from_json turns it into an Error).
template <typename T>
T parsed(std::optional<T> v, const std::string& what) {
  if (!v) throw std::invalid_argument("unknown " + what);
  return *v;
}

}  // namespace

Result<ArgValue> arg_from_json(const WorkerJson& j) {
  try {
    ArgValue a;
    a.name = j.at("name").get<std::string>();
    const std::string kind = j.at("kind").get<std::string>();
    if (kind == "buffer") {
      a.kind = ArgKind::buffer;
      const std::string role = j.at("role").get<std::string>();
      a.role = role == "in"      ? BufferRole::in
               : role == "out"   ? BufferRole::out
               : role == "inout" ? BufferRole::inout
                                 : BufferRole::workspace;
      a.dtype = j.at("dtype").get<std::string>();
      a.count = j.at("count").get<std::int64_t>();
      const auto& init = j.at("init");
      a.init.kind = init.at("kind").get<std::string>() == "uniform" ? InitSpec::Kind::uniform
                                                                    : InitSpec::Kind::normal;
      a.init.a = init.at("a").get<double>();
      a.init.b = init.at("b").get<double>();
      a.pass = j.value("pass", true);
    } else if (kind == "scalar") {
      a.kind = ArgKind::scalar;
      const std::string s = j.at("scalar").get<std::string>();
      a.scalar = s == "i32" ? ScalarType::i32 : s == "i64" ? ScalarType::i64 : ScalarType::f32;
      a.value = j.at("value").get<double>();
    } else if (kind == "tensor_map") {
      a.kind = ArgKind::tensor_map;
      a.map.buffer = j.at("buffer").get<std::string>();
      a.dtype = j.at("dtype").get<std::string>();
      a.map.dims = j.at("dims").get<std::vector<std::uint64_t>>();
      a.map.strides = j.at("strides").get<std::vector<std::uint64_t>>();
      a.map.box = j.at("box").get<std::vector<std::uint32_t>>();
      a.map.element_strides = j.at("element_strides").get<std::vector<std::uint32_t>>();
      a.map.swizzle = parsed(parse_swizzle(j.at("swizzle").get<std::string>()), "swizzle");
      a.map.l2_promotion =
          parsed(parse_l2_promotion(j.at("l2_promotion").get<std::string>()), "l2_promotion");
      a.map.oob_fill = parsed(parse_oob_fill(j.at("oob_fill").get<std::string>()), "oob_fill");
      const size_t rank = a.map.dims.size();
      if (rank < 1 || rank > 5 || a.map.strides.size() != rank - 1 || a.map.box.size() != rank ||
          a.map.element_strides.size() != rank)
        throw std::invalid_argument("tensor map '" + a.name + "': inconsistent ranks");
    } else {
      throw std::invalid_argument("unknown kind '" + kind + "'");
    }
    return a;
  } catch (const std::exception& e) {
    return fail(ErrorCode::corruption, std::string("arg: ") + e.what());
  }
}

WorkerJson to_json(const LaunchGeometry& g) {
  return {{"grid", g.grid}, {"block", g.block}, {"smem", g.smem}, {"cluster", g.cluster}};
}

LaunchGeometry launch_from_json(const WorkerJson& j) {
  LaunchGeometry g;
  g.grid = j.at("grid").get<std::array<std::uint32_t, 3>>();
  g.block = j.at("block").get<std::array<std::uint32_t, 3>>();
  g.smem = j.at("smem").get<std::uint32_t>();
  if (j.contains("cluster")) g.cluster = j.at("cluster").get<std::array<std::uint32_t, 3>>();
  return g;
}

WorkerJson to_json(const TimingOptions& t) {
  return {{"warmup_ms", t.warmup_ms},           {"target_ms", t.target_ms},
          {"min_samples", t.min_samples},       {"max_samples", t.max_samples},
          {"graph_below_us", t.graph_below_us}, {"l2", std::string(to_string(t.l2))}};
}

TimingOptions timing_options_from_json(const WorkerJson& j) {
  TimingOptions t;
  t.warmup_ms = j.value("warmup_ms", t.warmup_ms);
  t.target_ms = j.value("target_ms", t.target_ms);
  t.min_samples = j.value("min_samples", t.min_samples);
  t.max_samples = j.value("max_samples", t.max_samples);
  t.graph_below_us = j.value("graph_below_us", t.graph_below_us);
  if (auto l2 = parse_timing_l2(j.value("l2", std::string(to_string(t.l2))))) t.l2 = *l2;
  return t;
}

WorkerJson to_json(const TrialRequest& r) {
  WorkerJson args = WorkerJson::array();
  for (const auto& a : r.args) args.push_back(to_json(a));
  WorkerJson params = WorkerJson::object();
  for (const auto& [n, v] : r.params) params[n] = v;
  return {{"op", "trial"},
          {"id", r.id},
          {"params", params},
          {"lowered_name", r.lowered_name},
          {"launch", to_json(r.launch)},
          {"args", args},
          {"tolerance", r.tolerance},
          {"verify", r.verify},
          {"timing", to_json(r.timing)},
          {"reload", r.reload}};
}

Result<TrialRequest> trial_request_from_json(const WorkerJson& j) {
  try {
    TrialRequest r;
    r.id = j.at("id").get<std::uint64_t>();
    if (j.contains("params"))
      for (auto it = j["params"].begin(); it != j["params"].end(); ++it)
        r.params[it.key()] = it.value().get<std::int64_t>();
    r.lowered_name = j.at("lowered_name").get<std::string>();
    r.launch = launch_from_json(j.at("launch"));
    for (const auto& a : j.at("args")) {
      auto arg = arg_from_json(a);
      if (!arg) return std::unexpected(arg.error());
      r.args.push_back(std::move(*arg));
    }
    r.tolerance = j.at("tolerance").get<double>();
    r.verify = j.value("verify", true);
    r.reload = j.value("reload", false);
    r.timing = timing_options_from_json(j.value("timing", WorkerJson::object()));
    return r;
  } catch (const std::exception& e) {
    return fail(ErrorCode::corruption, std::string("trial request: ") + e.what());
  }
}

WorkerJson to_json(const Timing& t) {
  return {{"median_us", t.median_us},
          {"p10_us", t.p10_us},
          {"p90_us", t.p90_us},
          {"samples", t.samples},
          {"graph", t.graph}};
}

Timing timing_from_json(const WorkerJson& j) {
  Timing t;
  t.median_us = j.value("median_us", 0.0);
  t.p10_us = j.value("p10_us", 0.0);
  t.p90_us = j.value("p90_us", 0.0);
  t.samples = j.value("samples", 0);
  t.graph = j.value("graph", false);
  return t;
}

WorkerJson to_json(const GpuTelemetry& t) {
  return {{"sm_clock_mhz", t.sm_clock_mhz},
          {"mem_clock_mhz", t.mem_clock_mhz},
          {"power_w", t.power_w},
          {"utilization_percent", t.utilization_percent},
          {"temperature_c", t.temperature_c},
          {"clock_event_reasons", t.clock_event_reasons},
          {"samples", t.samples},
          {"power_capped_share", t.power_capped_share},
          {"sm_clock_counted_mhz", t.sm_clock_counted_mhz}};
}

GpuTelemetry telemetry_from_json(const WorkerJson& j) {
  GpuTelemetry t;
  t.sm_clock_mhz = j.value("sm_clock_mhz", 0);
  t.mem_clock_mhz = j.value("mem_clock_mhz", 0);
  t.power_w = j.value("power_w", 0.0);
  t.utilization_percent = j.value("utilization_percent", 0);
  t.temperature_c = j.value("temperature_c", 0);
  t.clock_event_reasons = j.value("clock_event_reasons", std::uint64_t{0});
  t.samples = j.value("samples", 0);
  t.power_capped_share = j.value("power_capped_share", 0.0);
  t.sm_clock_counted_mhz = j.value("sm_clock_counted_mhz", 0);
  return t;
}

WorkerJson to_json(const TrialResult& r) {
  return {{"id", r.id},
          {"outcome", std::string(to_string(r.outcome))},
          {"timing", to_json(r.timing)},
          {"ref_error", storable_ref_error(r.ref_error)},
          {"message", r.message},
          {"telemetry", to_json(r.telemetry)}};
}

Result<TrialResult> trial_result_from_json(const WorkerJson& j) {
  try {
    TrialResult r;
    r.id = j.at("id").get<std::uint64_t>();
    auto outcome = parse_outcome(j.at("outcome").get<std::string>());
    if (!outcome) return std::unexpected(outcome.error());
    r.outcome = *outcome;
    r.timing = timing_from_json(j.value("timing", WorkerJson::object()));
    r.ref_error = ref_error_from_storable(j.value("ref_error", 0.0));
    r.message = j.value("message", "");
    r.telemetry = telemetry_from_json(j.value("telemetry", WorkerJson::object()));
    return r;
  } catch (const std::exception& e) {
    return fail(ErrorCode::corruption, std::string("trial result: ") + e.what());
  }
}

void die_with_parent() {
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() == 1) std::_Exit(0);  // the parent died before prctl took effect
}

}  // namespace ktune
