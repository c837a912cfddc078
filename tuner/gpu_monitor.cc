#include "tuner/gpu_monitor.h"

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "tuner/nvml.h"

namespace ktune {

namespace {

class NvmlMonitor final : public GpuMonitor {
 public:
  explicit NvmlMonitor(const Nvml& nvml) : m_nvml(nvml) {}

  Result<GpuActivity> sample(int /*ordinal*/, const std::string& pci_bus_id) override {
    // Pids first: a process that starts between the two calls then shows as utilization, which
    // the policy also reads as busy, rather than slipping through both.
    auto pids = m_nvml.compute_pids(pci_bus_id);
    if (!pids) return std::unexpected(pids.error());
    auto utilization = m_nvml.utilization(pci_bus_id);
    if (!utilization) return std::unexpected(utilization.error());
    return GpuActivity{*utilization, std::move(*pids)};
  }

  std::string describe() const override {
    auto version = m_nvml.driver_version();
    return "NVML (driver " + (version ? *version : std::string("unknown")) + ")";
  }

 private:
  const Nvml& m_nvml;
};

class FileMonitor final : public GpuMonitor {
 public:
  explicit FileMonitor(std::string dir) : m_dir(std::move(dir)) {}

  Result<GpuActivity> sample(int ordinal, const std::string& /*pci_bus_id*/) override {
    const std::string path = m_dir + "/gpu" + std::to_string(ordinal) + ".json";
    std::ifstream in(path);
    if (!in) {
      std::error_code ec;
      if (!std::filesystem::exists(path, ec) && !ec) return GpuActivity{};
      return fail(ErrorCode::io_error, path + ": cannot read");
    }
    std::stringstream text;
    text << in.rdbuf();
    return parse(path, text.str());
  }

  std::string describe() const override { return "fake NVML files in " + m_dir; }

 private:
  static Result<GpuActivity> parse(const std::string& path, const std::string& text) {
    auto malformed = [&](const std::string& what) {
      return fail(ErrorCode::corruption,
                  path + ": " + what + R"( (want {"utilization": N, "pids": [..]}))");
    };
    const nlohmann::json doc = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (!doc.is_object()) return malformed("not a JSON object");
    GpuActivity activity;
    for (const auto& [key, value] : doc.items()) {
      if (key == "utilization") {
        if (!value.is_number_integer() || value.get<std::int64_t>() < 0 ||
            value.get<std::int64_t>() > 100)
          return malformed("utilization must be an integer 0..100");
        activity.utilization_percent = int(value.get<std::int64_t>());
      } else if (key == "pids") {
        if (!value.is_array()) return malformed("pids must be an array");
        for (const auto& pid : value) {
          if (!pid.is_number_unsigned() || pid.get<std::uint64_t>() > UINT32_MAX)
            return malformed("pids must be integers 0..2^32-1");
          activity.compute_pids.push_back(pid.get<std::uint32_t>());
        }
      } else {
        return malformed("unknown key '" + key + "'");
      }
    }
    return activity;
  }

  std::string m_dir;
};

class UnavailableMonitor final : public GpuMonitor {
 public:
  explicit UnavailableMonitor(Error why) : m_why(std::move(why)) {}
  Result<GpuActivity> sample(int, const std::string&) override { return std::unexpected(m_why); }
  std::string describe() const override { return "no GPU monitor (" + m_why.message + ")"; }

 private:
  Error m_why;
};

}  // namespace

Result<std::unique_ptr<GpuMonitor>> make_nvml_monitor() {
  auto nvml = Nvml::get();
  if (!nvml) return std::unexpected(nvml.error());
  return std::make_unique<NvmlMonitor>(**nvml);
}

std::unique_ptr<GpuMonitor> make_file_monitor(std::string dir) {
  return std::make_unique<FileMonitor>(std::move(dir));
}

std::unique_ptr<GpuMonitor> make_unavailable_monitor(Error why) {
  return std::make_unique<UnavailableMonitor>(std::move(why));
}

Result<std::unique_ptr<GpuMonitor>> make_gpu_monitor() {
  if (const char* dir = std::getenv("KTUNE_FAKE_NVML_DIR"); dir && *dir)
    return make_file_monitor(dir);
  return make_nvml_monitor();
}

}  // namespace ktune
