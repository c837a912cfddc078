// ktune-index-bench: what a batch upsert into the WinnerIndex costs its readers (bench/NOTES.md,
// "Imports built aside").
//
// An index of `--winners` winners in one family (the shape grid of lookup_traffic/make_table.py:
// M = 64 i, N = 256 j, K = 256 k, gemm bf16 rc), then batch upserts of each `--sizes` size, each
// replacing that many records (the cached+import point's imports replace every record). For
// each size, over `--rounds` rounds: the upsert's wall time, and the longest exact() call of a
// reader thread that looks one key up in a loop meanwhile (how long a lookup can wait behind
// the batch). Medians and maxima over the rounds, one JSON object per size.
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <iostream>
#include <thread>

#include "daemon/winner_index.h"
#include "tests/fakes/test_records.h"

namespace ktune {
namespace {

using Clock = std::chrono::steady_clock;

double micros(Clock::duration d) {
  return std::chrono::duration<double, std::micro>(d).count();
}

std::vector<WinnerRecord> grid(int count, double median_us) {
  int side = 1;
  while (2 * side * side * side < count) ++side;
  std::vector<WinnerRecord> out;
  for (int i = 1; i <= 2 * side; ++i)
    for (int j = 1; j <= side; ++j)
      for (int k = 1; k <= side && int(out.size()) < count; ++k) {
        WinnerRecord w =
            testing::winner(testing::gemm_problem(64 * i, 256 * j, 256 * k), median_us);
        w.problem.layout = "rc";
        out.push_back(std::move(w));
      }
  return out;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

int run(int winners, const std::vector<int>& sizes, int rounds) {
  const std::vector<WinnerRecord> records = grid(winners, 10);
  WinnerIndex index;
  auto t0 = Clock::now();
  index.load(records);
  std::cout << nlohmann::json{{"load_ms", micros(Clock::now() - t0) / 1e3},
                              {"winners", index.size()}}
            << "\n";
  const std::string device = testing::h200().id();
  const Problem hot = records[records.size() / 2].problem;
  std::atomic<bool> stop{false};
  std::atomic<double> longest{0};
  std::atomic<std::uint64_t> calls{0};  // the reader's finished calls
  std::thread reader([&] {
    while (!stop.load(std::memory_order_relaxed)) {
      const auto a = Clock::now();
      auto r = index.exact(device, hot);
      const double us = micros(Clock::now() - a);
      if (!r) std::abort();
      double seen = longest.load(std::memory_order_relaxed);
      while (us > seen && !longest.compare_exchange_weak(seen, us)) {
      }
      calls.fetch_add(1, std::memory_order_release);
    }
  });
  for (const int size : sizes) {
    std::vector<double> upsert_us, wait_us;
    for (int round = 0; round < rounds; ++round) {
      std::vector<WinnerRecord> batch(records.begin(),
                                      records.begin() + std::min<size_t>(size, records.size()));
      for (auto& r : batch) r.ranked[0].median_us = 10 + round + 1;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));  // the reader's own tail
      longest.store(0);
      t0 = Clock::now();
      index.upsert(std::move(batch));
      upsert_us.push_back(micros(Clock::now() - t0));
      // A call that waited on the batch ends after it returns: wait for the reader to finish
      // two more (the one in flight and a whole one after it).
      const std::uint64_t after = calls.load(std::memory_order_acquire);
      while (calls.load(std::memory_order_acquire) < after + 2) std::this_thread::yield();
      wait_us.push_back(longest.load());
    }
    std::cout << nlohmann::json{{"batch", size},
                                {"upsert_us_median", median(upsert_us)},
                                {"upsert_us_max",
                                 *std::max_element(upsert_us.begin(), upsert_us.end())},
                                {"reader_longest_us_median", median(wait_us)},
                                {"reader_longest_us_max",
                                 *std::max_element(wait_us.begin(), wait_us.end())}}
              << "\n";
  }
  stop = true;
  reader.join();
  return 0;
}

}  // namespace
}  // namespace ktune

int main(int argc, char** argv) {
  CLI::App app{"ktune-index-bench: batch upserts into the WinnerIndex against a reader"};
  int winners = 100'000;
  std::vector<int> sizes = {1, 16, 64, 256, 257, 1024, 4096, 100'000};
  int rounds = 9;
  app.add_option("--winners", winners, "winners in the index (one family)");
  app.add_option("--sizes", sizes, "batch sizes, each replacing that many records");
  app.add_option("--rounds", rounds, "upserts per size");
  CLI11_PARSE(app, argc, argv);
  return ktune::run(winners, sizes, rounds);
}
