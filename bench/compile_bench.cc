// ktune-compile-bench: NVRTC throughput of the built-in templates, kernels/second with one thread
// and with all of them, cold (nothing cached, NVRTC's own cache off) and warm (ktune's cubin
// cache hit). Writes one JSON document (--out) with the machine, NVRTC version and date.
//
//   ktune-compile-bench [--template gemm] [--configs 32] [--out bench/results/compile-<host>.json]
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "config/config.h"
#include "store/mem_store.h"
#include "store/rocksdb_store.h"
#include "store/table_io.h"
#include "templates/registry.h"
#include "templates/space.h"
#include "tuner/compiler.h"

namespace {

using namespace ktune;
using Json = nlohmann::ordered_json;

std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);)
    if (line.starts_with("model name")) return line.substr(line.find(':') + 2);
  return "unknown";
}

std::string utc_now() {
  const std::time_t t = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  return buf;
}

struct Run {
  std::string name;
  unsigned threads;
  bool warm;
  double wall_s = 0;
  double kernels_per_s = 0;
  double median_compile_ms = 0;
  int failures = 0;
};

}  // namespace

int main(int argc, char** argv) {
  std::string template_name = "gemm", arch = "sm_90", out;
  size_t configs = 32;
  CLI::App app{"ktune-compile-bench: NVRTC compile throughput, cold and cached"};
  app.add_option("--template", template_name)->capture_default_str();
  app.add_option("--arch", arch)->capture_default_str();
  app.add_option("--configs", configs, "configs compiled per run")->capture_default_str();
  app.add_option("--out", out, "write the JSON here as well");
  CLI11_PARSE(app, argc, argv);

  auto reg = TemplateRegistry::load({builtin_template_dir()});
  const KernelTemplate* t = reg.find(template_name);
  if (!t) return std::fprintf(stderr, "no template %s\n", template_name.c_str()), 1;
  const auto limits = *DeviceLimits::for_arch(arch.substr(0, 5));
  Problem p{t->manifest.op,
            t->manifest.dtypes.front(),
            t->manifest.dtypes.front(),
            t->manifest.default_layout,
            {}};
  for (const auto& d : t->manifest.dims) p.dims.emplace_back(d, d == "n" ? (1 << 26) : 4096);
  auto space = SearchSpace::build(*t, p, limits);
  if (!space) return std::fprintf(stderr, "%s\n", space.error().message.c_str()), 1;
  std::vector<CompileRequest> reqs;
  const auto& all = space->configs();
  configs = std::min(configs, all.size());
  for (size_t i = 0; i < configs; ++i)
    reqs.push_back(
        {t, instantiate(*t, p, limits, all[i * all.size() / configs])->name_expression, arch});

  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  std::vector<Run> runs;
  // The warm runs read a real RocksDB cubin cache, as ktuned does.
  char dir_template[] = "/tmp/ktune-compile-bench-XXXXXX";
  const std::string cache_dir = ::mkdtemp(dir_template);
  auto rocks = RocksDbStore::open(cache_dir + "/db");
  if (!rocks) return std::fprintf(stderr, "%s\n", rocks.error().message.c_str()), 1;
  Store& warm_cache = **rocks;
  auto measure = [&](const std::string& name, unsigned threads, Store* cache, bool warm) {
    Compiler compiler({.threads = threads, .cache = cache});
    const auto t0 = std::chrono::steady_clock::now();
    auto results = compiler.compile_all(reqs);
    Run r{name, threads, warm};
    r.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    r.kernels_per_s = double(results.size()) / r.wall_s;
    std::vector<double> ms;
    for (const auto& x : results) {
      r.failures += !x.ok();
      ms.push_back(warm ? x.wall_ms : x.kernel.compile_ms);
    }
    std::sort(ms.begin(), ms.end());
    r.median_compile_ms = ms[ms.size() / 2];
    std::printf("%-22s threads %2u: %6.2f s wall, %7.1f kernels/s, median %.1f ms per kernel%s\n",
                name.c_str(), threads, r.wall_s, r.kernels_per_s, r.median_compile_ms,
                r.failures ? " (FAILURES)" : "");
    runs.push_back(r);
  };
  MemStore cold1, cold2;
  measure("cold, 1 thread", 1, &cold1, false);
  measure("cold, all threads", cores, &warm_cache, false);  // fills the cache
  measure("cache hit, 1 thread", 1, &warm_cache, true);
  measure("cache hit, all threads", cores, &warm_cache, true);

  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  Json doc = {
      {"benchmark", "compile"},    {"date", utc_now()},        {"host", host},
      {"cpu", cpu_model()},        {"cores", cores},           {"nvrtc", Compiler::nvrtc_version()},
      {"template", template_name}, {"template_hash", t->hash}, {"arch", arch},
      {"problem", p.key()},        {"configs", configs},       {"runs", Json::array()}};
  for (const auto& r : runs)
    doc["runs"].push_back({{"name", r.name},
                           {"threads", r.threads},
                           {"cache_hit", r.warm},
                           {"wall_s", r.wall_s},
                           {"kernels_per_s", r.kernels_per_s},
                           {"median_ms_per_kernel", r.median_compile_ms},
                           {"failures", r.failures}});
  doc["cache"] = "RocksDB (cubins column family), as in ktuned";
  const std::string text = doc.dump(2) + "\n";
  rocks->reset();  // close the cache before removing it
  std::error_code ec;
  std::filesystem::remove_all(cache_dir, ec);
  if (!out.empty()) {
    if (auto ok = write_file_atomic(out, text); !ok)
      return std::fprintf(stderr, "%s\n", ok.error().message.c_str()), 1;
  }
  std::fputs(text.c_str(), stdout);
  int failures = 0;
  for (const auto& r : runs) failures += r.failures;
  return failures ? 1 : 0;
}
