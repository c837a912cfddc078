// ktune-memory-bench: what the daemon's in-memory tables cost at scale (issue 9 item 12, issue 10).
//
// Three measurements, in process (no sockets), each printed into one JSON object:
//  - nearest: WinnerIndex::nearest() per call with `--winners` winners in ONE family (gemm bf16 rc,
//    M from 1..8192, N and K multiples of 64 up to 16384), over `--queries` random shapes, radius
//    2 (the default), at limit 4 (the default) and 64 (the most); plus what loading the index and
//    one later upsert cost. An XXH3 over every answer lets runs before and after a change be
//    compared: the answers must be the same.
//  - misses: `--misses` distinct missed keys recorded into the MissTracker (with room for all of
//    them, then with the default tuning.miss_tracker_bytes), then the `status` and `misses`
//    (limit 20) ops through the Dispatcher, and the RSS the tracker took.
//  - cold: `--queries` lookups of shapes never asked before, through LookupService (JSON parse
//    included, as on the executor), with the `--winners` winners in the index. Their configs
//    carry a made-up template hash, so every neighbour found is stale and skipped: the nearest
//    search, then three heuristic entries. cold_live: the same lookups with each winner's config
//    the gemm template's heuristic pick for its shape under the installed hash, so neighbours
//    are served (the path of a node whose table came from the installed templates); and
//    cold_novel_n64_k64, the same over the shapes ktune-lookup-load's novel mix asks first
//    (M = 1..8192, N = K = 64: far from the socket benchmark's table, so three heuristic entries).
//  - fast path: one cached line answered by LookupService::fast_reply (the I/O thread's path),
//    `--fast` times, and one cached answer through lookup() (Cold::refuse, the key cache).
//  - pins (`--pins`, only this): the cold and fast measurements above with every lookup asked
//    twice, of the live table and of a pin of all of it (daemon/pins.h), interleaved request by
//    request so that drift in a shared machine's load falls on both alike.
//  - answers: `--big-lines` lookups whose request line carries a unique 60 KB unknown field (the
//    answer caches key their text cache by the line), and the RSS they left behind.
#include <malloc.h>
#include <unistd.h>
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <ctime>
#include <iostream>
#include <random>
#include <set>
#include <thread>

#include "daemon/process.h"
#include "templates/registry.h"
#include "templates/space.h"
#include "tests/fakes/daemon_parts.h"
#include "tests/fakes/test_records.h"

namespace ktune {
namespace {

using Clock = std::chrono::steady_clock;
using nlohmann::json;

double micros(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::micro>(b - a).count();
}

double percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, size_t(q * double(v.size())))];
}

json summary(const std::vector<double>& us) {
  double sum = 0;
  for (double x : us) sum += x;
  return {{"calls", us.size()},
          {"p50_us", percentile(us, 0.50)},
          {"p99_us", percentile(us, 0.99)},
          {"max_us", us.empty() ? 0 : *std::max_element(us.begin(), us.end())},
          {"mean_us", us.empty() ? 0 : sum / double(us.size())}};
}

// Resident set size of this process, in MiB (VmRSS), after handing freed heap back to the system
// (so what an earlier measurement freed does not hide what a later one takes).
// (resident_mib() alone, without the trim, is the RSS as the daemon would see it.)
double rss_mib() {
  malloc_trim(0);
  return resident_mib();
}

Problem llm_gemm(std::mt19937_64& rng) {
  auto uniform = [&](std::int64_t lo, std::int64_t hi) {
    return std::uniform_int_distribution<std::int64_t>(lo, hi)(rng);
  };
  return Problem{
      "gemm",
      "bf16",
      "bf16",
      "rc",
      {{"M", uniform(1, 8192)}, {"N", 64 * uniform(1, 256)}, {"K", 64 * uniform(1, 256)}}};
}

// `winners` distinct llm_gemm() shapes, each a winner (the next draws of `rng` follow them).
std::vector<WinnerRecord> llm_winners(std::mt19937_64& rng, int winners) {
  std::vector<WinnerRecord> records;
  std::set<std::string> keys;
  while (records.size() < size_t(winners)) {
    Problem p = llm_gemm(rng);
    if (keys.insert(p.key()).second) records.push_back(testing::winner(p, 10.0));
  }
  return records;
}

json bench_nearest(int winners, int queries) {
  std::mt19937_64 rng(7);
  std::vector<WinnerRecord> records = llm_winners(rng, winners);
  std::set<std::string> keys;  // queries are shapes outside the index
  for (const auto& r : records) keys.insert(r.problem.key());
  const std::string device = testing::h200().id();
  WinnerIndex index;
  const auto l0 = Clock::now();
  index.load(records);
  const auto l1 = Clock::now();
  json out = {{"winners", index.size()}, {"load_ms", micros(l0, l1) / 1000}};
  std::vector<double> upsert_us;
  for (int i = 0; i < 200; ++i) {
    Problem p = llm_gemm(rng);
    if (!keys.insert(p.key()).second) continue;
    const auto t0 = Clock::now();
    index.upsert(testing::winner(p, 10.0));
    upsert_us.push_back(micros(t0, Clock::now()));
  }
  out["upsert_new_key"] = summary(upsert_us);
  std::vector<Problem> asks;
  for (int i = 0; i < queries; ++i) asks.push_back(llm_gemm(rng));
  for (size_t max : {size_t(4), size_t(64)}) {
    std::vector<double> us;
    std::string answers;
    size_t found = 0;
    for (const auto& p : asks) {
      const auto t0 = Clock::now();
      auto near = index.nearest(device, p, 2.0, max);
      us.push_back(micros(t0, Clock::now()));
      found += near.size();
      for (const auto& n : near)
        answers += n.record->problem.key() + " " + std::to_string(n.distance) + "\n";
      answers += "--\n";
    }
    json s = summary(us);
    s["results"] = found;
    s["answers_xxh3"] = xxh3_hex(answers);
    out["limit_" + std::to_string(max)] = s;
  }
  return out;
}

json bench_misses(testing::DaemonParts& parts, int misses) {
  std::mt19937_64 rng(11);
  const DeviceClass device = testing::h200();
  const double rss0 = rss_mib();
  std::vector<double> record_us;
  const auto t0 = Clock::now();
  for (int i = 0; i < misses; ++i) {
    Problem p = llm_gemm(rng);
    p.dims[0].second = 1 + i % 8192;  // distinct: M from i, N from i / 8192
    p.dims[1].second = 64 * (1 + (i / 8192) % 256);
    p.dims[2].second = 64 * (1 + (i / (8192 * 256)));
    parts.misses.record(device, p, "no winner", 5.0 + double(i % 1000), 0.3);
  }
  const auto t1 = Clock::now();
  json out = {{"recorded", misses},
              {"distinct_kept", parts.misses.distinct()},
              {"bytes_charged", parts.misses.stats().bytes},
              {"record_mean_us", micros(t0, t1) / misses},
              {"rss_growth_mib", rss_mib() - rss0}};
  for (const auto& [name, line] :
       {std::pair{"status", std::string(R"({"v":1,"id":1,"op":"status"})")},
        std::pair{"misses_op", std::string(R"({"v":1,"id":1,"op":"misses","limit":20})")}}) {
    std::vector<double> us;
    for (int i = 0; i < 20; ++i) {
      const auto s0 = Clock::now();
      auto r = parts.dispatcher.handle(line);
      us.push_back(micros(s0, Clock::now()));
      if (r.line.find(R"("ok":true)") == std::string::npos) std::cerr << r.line;
    }
    out[name] = summary(us);
  }
  return out;
}

// Each record's config becomes `tmpl`'s heuristic pick for its shape, under the installed hash
// (what a table exported by a node running these templates holds); records it cannot serve keep
// their made-up config.
void make_live(std::vector<WinnerRecord>& records, const KernelTemplate& tmpl,
               const DeviceLimits& limits) {
  for (auto& r : records) {
    auto config = heuristic_config(tmpl, r.problem, limits);
    if (!config) continue;
    r.ranked.resize(1);
    r.ranked[0].template_name = tmpl.name();
    r.ranked[0].template_hash = tmpl.hash;
    r.ranked[0].params = std::move(*config);
  }
}

enum class Neighbours { stale, live };

// `novel`: the shapes ktune-lookup-load's novel mix asks at --novel-offset 0 (M = 1 + i, N = K =
// 64) instead of llm_gemm() draws.
json bench_cold(testing::DaemonParts& parts, int winners, int queries, bool novel = false,
                Neighbours neighbours = Neighbours::stale) {
  std::mt19937_64 rng(7);
  std::vector<WinnerRecord> records = llm_winners(rng, winners);
  if (neighbours == Neighbours::live)
    make_live(records, *parts.templates.find("gemm"), parts.node.limits_for(testing::h200()));
  parts.index.load(std::move(records));
  std::vector<std::string> lines;
  for (int i = 0; i < queries; ++i) {
    Problem p = llm_gemm(rng);
    if (novel) p.dims = {{"M", 1 + i % 8192}, {"N", 64}, {"K", 64}};
    lines.push_back(
        R"({"v":1,"id":1,"op":"lookup","device":"nvidia-h200","problem":{"op":"gemm","dtype":"bf16","layout":"rc","dims":{"M":)" +
        std::to_string(p.dims[0].second) + R"(,"N":)" + std::to_string(p.dims[1].second) +
        R"(,"K":)" + std::to_string(p.dims[2].second) + "}}}");
  }
  std::vector<double> us;
  int errors = 0, nearest_first = 0;
  for (const auto& line : lines) {
    const auto t0 = Clock::now();
    auto a = parts.lookups.lookup(protocol::Json::parse(line), LookupService::Cold::build, line);
    us.push_back(micros(t0, Clock::now()));
    if (!a && ++errors == 1) std::cerr << a.error().message << "\n";
    if (a && *a && (*a)->provenance == "nearest") ++nearest_first;
  }
  json out = summary(us);
  out["errors"] = errors;
  out["nearest_first"] = nearest_first;  // answers whose best entry is a neighbour's winner
  out["winners"] = parts.index.size();
  return out;
}

json bench_fast(testing::DaemonParts& parts, int calls) {
  const std::string line =
      R"({"v":1,"id":1,"op":"lookup","device":")" + testing::h200().id() +
      R"(","problem":{"op":"gemm","dtype":"bf16","layout":"rc","dims":{"M":4096,"N":4096,"K":4096}}})";
  const auto body = protocol::Json::parse(line);
  (void)parts.lookups.lookup(body, LookupService::Cold::build, line);
  size_t bytes = 0;
  const auto t0 = Clock::now();
  for (int i = 0; i < calls; ++i) bytes += parts.lookups.fast_reply(line)->size();
  const auto t1 = Clock::now();
  for (int i = 0; i < calls; ++i)
    bytes += parts.lookups.lookup(body, LookupService::Cold::refuse)->get()->result.size();
  const auto t2 = Clock::now();
  return {{"calls", calls},
          {"fast_reply_ns", micros(t0, t1) * 1000 / calls},
          {"key_cache_lookup_ns", micros(t1, t2) * 1000 / calls},
          {"bytes", bytes}};
}

// Pinned against live lookups, interleaved (see the header).
json bench_pins(testing::DaemonParts& parts, int winners, int queries, int calls) {
  std::mt19937_64 rng(7);
  parts.index.load(llm_winners(rng, winners));
  if (auto made = parts.pins.create("bench", {}); !made) {
    std::cerr << made.error().message << "\n";
    return {{"error", made.error().message}};
  }
  const std::string pinned = R"(,"pin":"bench")";
  auto line_of = [](const Problem& p, const std::string& extra) {
    return R"({"v":1,"id":1,"op":"lookup","device":"nvidia-h200","problem":{"op":"gemm","dtype":"bf16","layout":"rc","dims":{"M":)" +
           std::to_string(p.dims[0].second) + R"(,"N":)" + std::to_string(p.dims[1].second) +
           R"(,"K":)" + std::to_string(p.dims[2].second) + "}}" + extra + "}";
  };
  std::vector<double> live_us, pin_us;
  int errors = 0;
  auto time_one = [&](const std::string& line, std::vector<double>& us) {
    const auto t0 = Clock::now();
    auto a = parts.lookups.lookup(protocol::Json::parse(line), LookupService::Cold::build, line);
    us.push_back(micros(t0, Clock::now()));
    if (!a && ++errors == 1) std::cerr << a.error().message << "\n";
  };
  for (int i = 0; i < queries; ++i) {
    const Problem p = llm_gemm(rng);
    if (i % 2) {
      time_one(line_of(p, ""), live_us);
      time_one(line_of(p, pinned), pin_us);
    } else {
      time_one(line_of(p, pinned), pin_us);
      time_one(line_of(p, ""), live_us);
    }
  }
  const Problem hot = llm_gemm(rng);
  const std::string live_line = line_of(hot, ""), pin_line = line_of(hot, pinned);
  time_one(live_line, live_us);
  time_one(pin_line, pin_us);
  double fast_ns[2] = {0, 0};
  size_t bytes = 0;
  for (int round = 0; round < 10; ++round)
    for (int which = 0; which < 2; ++which) {
      const std::string& line = which ? pin_line : live_line;
      const auto t0 = Clock::now();
      for (int i = 0; i < calls / 10; ++i) bytes += parts.lookups.fast_reply(line)->size();
      fast_ns[which] += micros(t0, Clock::now()) * 1000 / calls;
    }
  return {{"winners", parts.index.size()},
          {"pinned_records", parts.pins.find("bench")->index.size()},
          {"cold_live", summary(live_us)},
          {"cold_pinned", summary(pin_us)},
          {"fast_reply_ns_live", fast_ns[0]},
          {"fast_reply_ns_pinned", fast_ns[1]},
          {"errors", errors},
          {"bytes", bytes}};
}

json bench_answers(testing::DaemonParts& parts, int lines) {
  const std::string head =
      R"({"v":1,"id":1,"op":"lookup","device":")" + testing::h200().id() +
      R"(","problem":{"op":"gemm","dtype":"bf16","layout":"rc","dims":{"M":4096,"N":4096,"K":4096}})";
  const auto body = protocol::Json::parse(head + "}");
  std::string line = head + R"(,"pad":")" + std::string(60'000, 'x') + "\"}";
  const size_t stamp = head.size() + 8;  // inside the pad
  const double rss0 = rss_mib();
  const auto t0 = Clock::now();
  int errors = 0;
  for (int i = 0; i < lines; ++i) {
    const std::string n = std::to_string(i);
    line.replace(stamp, n.size(), n);
    auto a = parts.lookups.lookup(body, LookupService::Cold::build, line);
    if (!a && ++errors == 1) std::cerr << a.error().message << "\n";
  }
  const auto t1 = Clock::now();
  const auto caches = parts.lookups.cache_stats();
  return {{"lookups", lines},
          {"errors", errors},
          {"cache_bytes", caches.answers.bytes + caches.lines.bytes},
          {"lines_not_cached", caches.lines_too_long},
          {"line_bytes", line.size()},
          {"mean_us", micros(t0, t1) / lines},
          {"rss_growth_mib", rss_mib() - rss0}};
}

// `distinct` never-seen gemm lookups from `threads` threads through what a daemon runs for each
// (parse, LookupService::lookup with its line, reply(): the answer and line caches, the miss
// tracker), with `winners` winners in the index; the RSS (untrimmed) sampled as keys go by.
// Everything that grows with distinct keys is in these structures; sockets add per-connection
// buffers only (issue 10: RSS bounded after 10 million distinct keys).
json bench_distinct(testing::DaemonParts& parts, int winners, std::int64_t distinct, int threads,
                    double max_seconds) {
  std::mt19937_64 rng(7);
  std::vector<WinnerRecord> records = llm_winners(rng, winners);
  parts.index.load(std::move(records));
  const double rss0 = resident_mib();
  std::atomic<std::int64_t> next{0}, done{0}, errors{0};
  std::atomic<bool> finished{false};
  json curve = json::array();
  const auto t0 = Clock::now();
  std::thread sampler([&] {
    std::int64_t mark = 0;
    while (!finished.load()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));  // a sampling period, not a sync
      const std::int64_t d = done.load();
      if (d >= mark) {
        curve.push_back({{"keys", d},
                         {"rss_mib", resident_mib()},
                         {"seconds", micros(t0, Clock::now()) / 1e6}});
        mark = d + distinct / 20;
      }
    }
  });
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t)
    pool.emplace_back([&] {
      for (std::int64_t i = next++; i < distinct; i = next++) {
        if (i % 4096 == 0 && micros(t0, Clock::now()) > max_seconds * 1e6) {
          next = distinct;  // out of time: every thread stops at its next key
          break;
        }
        const std::int64_t m = 1 + i % 8192, n = 64 * (1 + (i / 8192) % 256),
                           k = 64 * (1 + (i / (8192 * 256)) % 256);
        const std::string line =
            R"({"v":1,"id":1,"op":"lookup","device":"nvidia-h200","problem":{"op":"gemm","dtype":"bf16","layout":"rc","dims":{"M":)" +
            std::to_string(m) + R"(,"N":)" + std::to_string(n) + R"(,"K":)" + std::to_string(k) +
            "}}}";
        const auto s0 = std::chrono::steady_clock::now();
        auto a =
            parts.lookups.lookup(protocol::Json::parse(line), LookupService::Cold::build, line);
        if (a && *a)
          (void)parts.lookups.reply(protocol::Json(1), **a, s0);
        else
          ++errors;
        ++done;
      }
    });
  for (auto& t : pool) t.join();
  finished = true;
  sampler.join();
  const double seconds = micros(t0, Clock::now()) / 1e6;
  const auto caches = parts.lookups.cache_stats();
  const auto m = parts.misses.stats();
  curve.push_back({{"keys", done.load()}, {"rss_mib", resident_mib()}, {"seconds", seconds}});
  return {{"distinct", done.load()},
          {"threads", threads},
          {"errors", errors.load()},
          {"seconds", seconds},
          {"per_second", double(done.load()) / seconds},
          {"winners", parts.index.size()},
          {"rss_mib_after_index", rss0},
          {"rss_mib_end", resident_mib()},
          {"rss_curve", curve},
          {"answer_cache",
           {{"entries", caches.answers.entries},
            {"bytes", caches.answers.bytes},
            {"evictions", caches.answers.evictions}}},
          {"line_cache", {{"entries", caches.lines.entries}, {"bytes", caches.lines.bytes}}},
          {"miss_tracker",
           {{"distinct", m.distinct},
            {"bytes", m.bytes},
            {"max_bytes", m.max_bytes},
            {"evicted", m.evicted}}}};
}

int run(int winners, int queries, int misses, int big_lines, int fast, std::int64_t distinct,
        int threads, double max_seconds, const std::string& label, bool pins,
        const std::string& only_cold) {
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  const std::time_t now = std::time(nullptr);
  char date[32];
  std::strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
  json out = {{"benchmark", "memory"},
              {"label", label},
              {"host", host},
              {"cpu_threads", sysconf(_SC_NPROCESSORS_ONLN)},
              {"date", date}};
  if (distinct > 0) {  // only the distinct-keys run
    const auto templates = TemplateRegistry::load({builtin_template_dir()});
    NodeIdentity node;
    node.node_id = "bench";
    node.gpu_error = "no GPU in the bench";
    testing::DaemonParts parts(default_config(), templates, node);
    out["distinct"] = bench_distinct(parts, winners, distinct, threads, max_seconds);
    std::cout << out.dump(2) << "\n";
    return 0;
  }
  if (pins) {  // only the pinned-against-live run
    const auto templates = TemplateRegistry::load({builtin_template_dir()});
    NodeIdentity node;
    node.node_id = "bench";
    node.gpu_error = "no GPU in the bench";
    testing::DaemonParts parts(default_config(), templates, node);
    out["pins"] = bench_pins(parts, winners, queries, fast);
    std::cout << out.dump(2) << "\n";
    return 0;
  }
  const auto templates = TemplateRegistry::load({builtin_template_dir()});
  DaemonConfig config = default_config();
  NodeIdentity node;
  node.node_id = "bench";
  node.gpu_error = "no GPU in the bench";
  const auto cold_phase = [&](const std::string& name) {
    testing::DaemonParts parts(config, templates, node);
    if (name == "cold") return bench_cold(parts, winners, queries);
    if (name == "cold_live") return bench_cold(parts, winners, queries, false, Neighbours::live);
    return bench_cold(parts, winners, std::min(queries, 8192), true);
  };
  // One cold phase alone (e.g. under callgrind: bench/lookup_instructions.sh).
  if (!only_cold.empty()) {
    out[only_cold] = cold_phase(only_cold);
    std::cout << out.dump(2) << "\n";
    return 0;
  }
  out["nearest"] = bench_nearest(winners, queries);
  {
    DaemonConfig roomy = config;
    roomy.miss_tracker_bytes = 2'000'000'000;  // keep every key: the cost at --misses keys
    testing::DaemonParts parts(roomy, templates, node);
    out["misses"] = bench_misses(parts, misses);
  }
  {
    testing::DaemonParts parts(config, templates, node);  // the default bound
    out["misses_default_bound"] = bench_misses(parts, misses);
  }
  out["cold"] = cold_phase("cold");
  out["cold_live"] = cold_phase("cold_live");
  out["cold_novel_n64_k64"] = cold_phase("cold_novel_n64_k64");
  {
    testing::DaemonParts parts(config, templates, node);
    out["fast_path"] = bench_fast(parts, fast);
  }
  {
    testing::DaemonParts parts(config, templates, node);
    out["answers"] = bench_answers(parts, big_lines);
  }
  std::cout << out.dump(2) << "\n";
  return 0;
}

}  // namespace
}  // namespace ktune

int main(int argc, char** argv) {
  CLI::App app{"Times nearest search, the miss tracker and the answer caches at scale"};
  int winners = 100'000;
  int queries = 2000;
  int misses = 400'000;
  int big_lines = 40'000;
  int fast = 200'000;
  std::int64_t distinct = 0;
  int threads = int(std::max(1u, std::thread::hardware_concurrency()));
  double max_seconds = 1e9;
  std::string label = "run";
  bool pins = false;
  std::string only_cold;
  app.add_option("--winners", winners, "winners in the one family nearest searches");
  app.add_option("--queries", queries, "nearest calls per limit");
  app.add_option("--misses", misses, "distinct missed keys recorded");
  app.add_option("--big-lines", big_lines, "lookups with a unique 60 KB unknown field");
  app.add_option("--fast", fast, "fast-path and key-cache calls");
  app.add_option("--distinct", distinct,
                 "only: this many never-seen lookups through LookupService, RSS as they go");
  app.add_option("--threads", threads, "threads of the --distinct run (default: one per CPU)");
  app.add_option("--max-seconds", max_seconds, "--distinct: stop issuing keys after this long");
  app.add_option("--label", label, "a name for this run in the output");
  app.add_flag("--pins", pins,
               "only: cold and fast-path lookups of a pin against the live table, interleaved");
  app.add_option("--cold", only_cold, "only: this cold phase")
      ->check(CLI::IsMember({"cold", "cold_live", "cold_novel_n64_k64"}));
  CLI11_PARSE(app, argc, argv);
  return ktune::run(winners, queries, misses, big_lines, fast, distinct, threads, max_seconds,
                    label, pins, only_cold);
}
