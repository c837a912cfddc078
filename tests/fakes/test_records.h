// Sample records for tests: realistic winners with valid validators and hashes.
#pragma once

#include <unistd.h>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <sstream>
#include <string>

#include "store/records.h"

namespace ktune::testing {

// A whole file's bytes ("" when it cannot be read).
inline std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// `base` with the named params set to new values (a template config varied for a test).
inline Params with_params(Params base,
                          std::initializer_list<std::pair<const char*, std::int64_t>> changes) {
  for (const auto& [name, value] : changes) base[name] = value;
  return base;
}

inline DeviceClass h200() {
  return DeviceClass{"NVIDIA H200", 90, 132, 140};
}

inline Problem gemm_problem(std::int64_t m, std::int64_t n, std::int64_t k,
                            const std::string& dtype = "bf16") {
  return Problem{"gemm", dtype, dtype, "rr", {{"M", m}, {"N", n}, {"K", k}}};
}

inline WinnerRecord winner(const Problem& p, double median_us, const std::string& node = "node-a",
                           std::int64_t ts = 1'790'000'000) {
  WinnerRecord w;
  w.device = h200();
  w.problem = p;
  w.validators = Validators{"580.159.03", "13.0", k_store_format_version};
  RankedConfig c;
  c.template_name = "gemm";
  c.template_hash = "0123456789abcdef";
  c.params = {{"BLOCK_M", 128}, {"BLOCK_N", 256}, {"BLOCK_K", 32}, {"STAGES", 4}};
  c.median_us = median_us;
  c.spread_pct = 1.5;
  c.tflops = 2.0 * double(p.dim("M")) * double(p.dim("N")) * double(p.dim("K")) / (median_us * 1e6);
  w.ranked.push_back(c);
  RankedConfig second = c;
  second.params["STAGES"] = 3;
  second.median_us = median_us * 1.05;
  second.tflops = c.tflops / 1.05;
  w.ranked.push_back(second);
  w.ref_error = 3e-3;
  w.sm_clock_mhz = 1755;
  w.mem_clock_mhz = 3201;
  w.power_w = 612.5;
  w.node_id = node;
  w.timestamp = ts;
  w.trials = 300;
  w.strategy = "model";
  return w;
}

// A fresh directory under the test's temp dir, removed when the object dies.
class TempDir {
 public:
  TempDir() {
    char templ[] = "/tmp/ktune-test-XXXXXX";
    m_path = ::mkdtemp(templ);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(m_path, ec);
  }
  const std::string& path() const { return m_path; }
  std::string operator/(const std::string& leaf) const { return m_path + "/" + leaf; }

 private:
  std::string m_path;
};

// RocksDB table files (*.sst) in the database directory `db`: a flush adds one.
inline size_t table_files(const std::string& db) {
  size_t n = 0;
  for (const auto& f : std::filesystem::directory_iterator(db)) n += f.path().extension() == ".sst";
  return n;
}

}  // namespace ktune::testing
