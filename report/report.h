// The tuning report: one self-contained HTML page (inline CSS and SVG, a few lines of inline
// script, nothing fetched) drawn from recorded trials, a winners table and, when a daemon is
// asked, its status, misses and jobs.
//
// Inputs are plain data (ReportInput); the parsers below read the files ktune-bench writes
// (`--record`, docs/report.md) and the export format (store/table_io.h). render_report() is a
// pure function of its input: the CLI (`ktune report`), the daemon (`/report`) and the tests
// all go through it. Plots aggregate before drawing (a heatmap cell is the best of the configs
// that share its tile shape, a convergence curve keeps only the improvements), so the page's
// size grows with the number of distinct tile shapes and problems, not with the trial count.
//
// Thread-safety: everything here is a free function over values; safe from any thread.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "config/error.h"
#include "config/problem.h"
#include "store/records.h"

namespace ktune::report {

// One measured (or failed) config of a recorded search, in the order the search measured it.
struct Trial {
  std::string template_name;
  Params params;
  Outcome outcome = Outcome::ok;
  double median_us = 0;  // meaningful only when outcome == ok
  int sm_clock_mhz = 0;  // SM clock and board power read while it was timed (0: not recorded)
  double power_w = 0;
  int sm_clock_counted_mhz = 0;  // the SM clock counted in-kernel after it (0: not counted)
};

// The trials of one search: one problem on one device class, one strategy.
struct TrialSet {
  std::string source;        // where it came from: a file name, "store"
  std::string strategy;      // "model", "exhaustive", ...; "" when unknown
  std::string device_class;  // DeviceClass::id(), e.g. "nvidia-h200.sm90.132sm.140gib"
  std::string date;          // when recorded, as the file says it; may be ""
  Problem problem;
  std::vector<Trial> trials;
};

// How strategies converge on one recorded sweep, replayed offline (bench/ktune_replay.cc): for
// each strategy, the median over seeds of best-found / best-in-sweep after n trials.
struct ReplayCurves {
  std::string source;  // the replay file's name
  std::string data;    // the sweep it replayed, as the file names it
  int seeds = 0;
  Problem problem;
  size_t configs = 0;  // configs in the sweep
  double best_us = 0;  // the sweep's best
  struct Curve {
    std::string strategy;
    std::vector<std::pair<double, double>> points;  // (trials, fraction of the best speed)
    double trials_to_98pct = 0;                     // median over seeds
  };
  std::vector<Curve> curves;
};

// A device's measured ceilings, drawn as the roofline's roofs. The page prints `source`.
struct Ceilings {
  double copy_tbps = 0;        // device-to-device copy, read + write bytes, TB/s
  double tensor_tflops = 0;    // best measured tensor-core throughput (cuBLAS bf16 GEMM), TFLOP/s
  double mma_sync_tflops = 0;  // mma.sync instruction ceiling (0: not drawn)
  std::string source;          // where the figures were measured, for the reader
  // The device classes they hold for: a substring of the class id ("nvidia-h200"); winners of
  // other classes are listed beside the roofline, not drawn against these roofs.
  std::string device;
};
// The H200 figures of docs/GPU.md (measured 2026-11-29 on the lent H200).
Ceilings h200_ceilings();

struct ReportInput {
  std::string title = "ktune tuning report";
  std::string generated_by;  // e.g. "ktune report --trials ...", printed under the title
  std::string generated_at;  // ISO-8601 UTC (utc_now()); "" leaves it out (tests, reproducible files)
  std::vector<TrialSet> trial_sets;
  std::vector<ReplayCurves> replays;
  std::vector<WinnerRecord> winners;
  Ceilings ceilings = h200_ceilings();
  // What could not be read while gathering the input (a store's undecodable records), shown at
  // the top of the page.
  std::vector<std::string> notes;
  // A live daemon's replies (the status, misses and jobs ops' results); null when absent.
  nlohmann::json status;
  nlohmann::json misses;
  nlohmann::json jobs;
};

// What to keep: an empty field keeps everything. `device` matches a device class id exactly or
// as a substring ("h200"); `op` matches Problem::op exactly.
struct Filter {
  std::string device;
  std::string op;
};
void apply_filter(ReportInput& input, const Filter& filter);

// Parses a trials file written by `ktune-bench --record` (one TrialSet per problem). `origin`
// names the file in errors and becomes TrialSet::source.
Result<std::vector<TrialSet>> parse_trials(std::string_view text, std::string_view origin);

// Parses a replay file written by ktune-replay (`"benchmark": "replay"`).
Result<std::vector<ReplayCurves>> parse_replay(std::string_view text, std::string_view origin);
// Whether `text` is a replay file rather than a trials file (its "benchmark" says so).
bool is_replay_file(std::string_view text);

// Groups a store's trial records (daemon/ops: the `trials` table) into TrialSets, one per
// device class and problem, each ordered by timestamp. In-flight records are dropped.
std::vector<TrialSet> trial_sets_from_records(std::vector<TrialRecord> records);

// The whole page.
std::string render_report(const ReportInput& input);

// Text escaped for HTML/SVG text and attribute values (& < > " ').
std::string escape_html(std::string_view text);

// Now as ISO-8601 UTC ("2026-12-01T21:13:09Z"), for Inputs::generated_at.
std::string utc_now();

}  // namespace ktune::report
