// ktune-expr-bench: the template-side cost of a cold lookup (a shape never asked before).
//
// For every built-in template and many distinct shapes of its op, times heuristic_config() and
// then instantiate() of the config it picks, as the daemon does for a lookup it has no answer
// for. Each call builds its own Evaluator, so the calls share nothing: every sample is cold.
// Counts heap allocations per call with a counting global operator new. Prints one JSON object.
#include <unistd.h>
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <iostream>
#include <new>
#include <random>

#include "config/config.h"
#include "templates/registry.h"
#include "templates/space.h"

namespace {
std::atomic<long long> g_allocations{0};
}  // namespace

void* operator new(std::size_t size) {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(size ? size : 1)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept {
  std::free(p);
}
void operator delete(void* p, std::size_t) noexcept {
  std::free(p);
}

namespace ktune {
namespace {

// A distinct problem of the template's op: M drawn from 1..8192 as in LLM serving, the other
// dims from multiples of 64 (GEMM) or 8 (row ops) in realistic ranges.
Problem random_problem(const Manifest& m, std::mt19937_64& rng) {
  auto uniform = [&](std::int64_t lo, std::int64_t hi) {
    return std::uniform_int_distribution<std::int64_t>(lo, hi)(rng);
  };
  Problem p{m.op, m.dtypes.front(), m.dtypes.front(), m.layouts.begin()->first, {}};
  if (m.op == "gemm") {
    p.layout = m.layouts.count("rc") ? "rc" : p.layout;
    p.dims = {{"M", uniform(1, 8192)}, {"N", 64 * uniform(1, 256)}, {"K", 64 * uniform(1, 256)}};
  } else if (m.op == "reduce_sum") {
    p.dims = {{"n", uniform(1, 1 << 28)}};
  } else {
    p.dims = {{"rows", uniform(1, 65536)}, {"cols", 8 * uniform(1, 2048)}};
  }
  return p;
}

double percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, size_t(q * double(v.size())))];
}

// What a call answered, as text: the config, the kernel name, the launch and the buffer sizes.
// Runs before and after a change must give the same digests.
std::string answer_text(const Result<Params>& h, const Result<Instance>& inst) {
  if (!h) return "no config: " + h.error().message;
  if (!inst) return "no instance: " + inst.error().message;
  std::string s = params_to_string(*h) + " " + inst->name_expression;
  for (auto v : inst->launch.grid) s += " " + std::to_string(v);
  for (auto v : inst->launch.block) s += " " + std::to_string(v);
  s += " " + std::to_string(inst->launch.smem);
  for (const auto& a : inst->args)
    s += " " + std::to_string(a.count) + ":" + std::to_string(a.value);
  return s + " " + std::to_string(inst->metric) + "\n";
}

nlohmann::json summary(const std::vector<double>& us, long long allocations, int failures) {
  double sum = 0;
  for (double x : us) sum += x;
  return {{"calls", us.size()},
          {"failures", failures},
          {"p50_us", percentile(us, 0.50)},
          {"p99_us", percentile(us, 0.99)},
          {"mean_us", us.empty() ? 0 : sum / double(us.size())},
          {"allocations_per_call", us.empty() ? 0 : double(allocations) / double(us.size())}};
}

int run(int shapes, int rounds, const std::string& label, const std::string& arch) {
  auto registry = TemplateRegistry::load({builtin_template_dir()});
  for (const auto& e : registry.errors()) std::cerr << e.message << "\n";
  const auto limits = DeviceLimits::for_arch(arch);
  if (!limits) {
    std::cerr << limits.error().message << "\n";
    return 2;
  }
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  const std::time_t now = std::time(nullptr);
  char date[32];
  std::strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));

  nlohmann::json out = {{"benchmark", "expressions"},
                        {"label", label},
                        {"host", host},
                        {"cpu_threads", sysconf(_SC_NPROCESSORS_ONLN)},
                        {"date", date},
                        {"arch", arch},
                        {"shapes_per_template", shapes},
                        {"rounds", rounds},
                        {"call", "heuristic_config() then instantiate() of its config"}};
  std::vector<double> all_us;
  long long all_allocations = 0;
  int all_failures = 0;
  for (const auto& t : registry.all()) {
    const Manifest& m = t->manifest;
    if (m.min_cc > limits->cc || (m.max_cc && m.max_cc < limits->cc)) continue;
    std::mt19937_64 rng(42);
    std::vector<Problem> problems;
    for (int i = 0; i < shapes; ++i) problems.push_back(random_problem(m, rng));
    std::vector<double> us;
    long long allocations = 0;
    int failures = 0;
    std::string answers;  // of the first pass
    for (int r = 0; r < rounds; ++r) {
      for (const auto& p : problems) {
        const long long a0 = g_allocations.load(std::memory_order_relaxed);
        const auto t0 = std::chrono::steady_clock::now();
        auto h = heuristic_config(*t, p, *limits);
        auto inst = h ? instantiate(*t, p, *limits, *h)
                      : Result<Instance>(std::unexpected(Error{ErrorCode::internal, ""}));
        const auto t1 = std::chrono::steady_clock::now();
        allocations += g_allocations.load(std::memory_order_relaxed) - a0;
        failures += inst ? 0 : 1;
        us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
        if (r == 0) answers += answer_text(h, inst);
      }
    }
    out["templates"][m.name] = summary(us, allocations, failures);
    out["templates"][m.name]["answers_xxh3"] = xxh3_hex(answers);
    all_us.insert(all_us.end(), us.begin(), us.end());
    all_allocations += allocations;
    all_failures += failures;
  }
  out["all"] = summary(all_us, all_allocations, all_failures);
  std::cout << out.dump(2) << "\n";
  return 0;
}

}  // namespace
}  // namespace ktune

int main(int argc, char** argv) {
  CLI::App app{"Times the template-side work of cold lookups (heuristic_config + instantiate)"};
  int shapes = 300;
  int rounds = 3;
  std::string label = "run";
  std::string arch = "sm_90";
  app.add_option("--shapes", shapes, "distinct shapes per template");
  app.add_option("--rounds", rounds, "passes over the shapes (every call is cold either way)");
  app.add_option("--label", label, "a name for this run in the output");
  app.add_option("--arch", arch, "device limits to use (sm_80, sm_90)");
  CLI11_PARSE(app, argc, argv);
  return ktune::run(shapes, rounds, label, arch);
}
