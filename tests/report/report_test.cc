// The HTML report: its parsers, the marks it draws against the data's counts, escaping of
// hostile text, and its size for a large recorded search.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <random>
#include <regex>
#include <set>
#include <sstream>
#include <tuple>

#include "report/draw.h"
#include "report/report.h"
#include "store/table_io.h"
#include "tests/fakes/test_records.h"

namespace ktune::report {
namespace {

size_t count(const std::string& text, const std::string& needle) {
  size_t n = 0;
  for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) ++n;
  return n;
}

using testing::read_file;

Trial ok(std::int64_t bm, std::int64_t bn, std::int64_t stages, std::int64_t group, double us) {
  return Trial{"gemm_tma",
               {{"BLOCK_M", bm}, {"BLOCK_N", bn}, {"STAGES", stages}, {"GROUP_M", group}},
               Outcome::ok,
               us};
}
Trial failed(std::int64_t bm, std::int64_t bn, std::int64_t stages, Outcome outcome) {
  return Trial{"gemm_tma",
               {{"BLOCK_M", bm}, {"BLOCK_N", bn}, {"STAGES", stages}, {"GROUP_M", 1}},
               outcome,
               0};
}

TrialSet set_of(std::vector<Trial> trials, const std::string& strategy = "model") {
  return TrialSet{.source = "test-trials.json",
                  .strategy = strategy,
                  .device_class = testing::h200().id(),
                  .date = "2026-12-01T00:00:00Z",
                  .problem = testing::gemm_problem(4096, 4096, 4096),
                  .trials = std::move(trials)};
}

// Strict improvements of the best-so-far among ok trials: what the convergence curve marks.
size_t improvements(const TrialSet& set) {
  size_t n = 0;
  double best = 1e300;
  for (const Trial& t : set.trials)
    if (t.outcome == Outcome::ok && t.median_us < best) best = t.median_us, ++n;
  return n;
}

// The first "nan" or "inf" on the page that is a printed number (a coordinate such as
// "M58.0 -nanH548.0" or a label; "provenance" and "info" do not count), with what precedes it;
// empty when there is none.
std::string first_non_finite(const std::string& page) {
  auto letter = [&](size_t i) { return std::isalpha((unsigned char)page[i]) != 0; };
  auto lower = [&](size_t i) { return i < page.size() && std::islower((unsigned char)page[i]); };
  for (const char* word : {"nan", "inf"})
    for (size_t at = page.find(word); at != std::string::npos; at = page.find(word, at + 1))
      if ((at == 0 || !letter(at - 1)) && !lower(at + 3))
        return page.substr(at - std::min<size_t>(at, 80), 90);
  return "";
}

// render_report, and the check that no number on the page is NaN or infinite.
std::string render(const ReportInput& in) {
  std::string page = render_report(in);
  EXPECT_EQ(first_non_finite(page), "");
  return page;
}

TEST(ReportParse, ReadsAKtuneBenchRecordFile) {
  const std::string text = R"({"gpu":"NVIDIA H200","device_class":"nvidia-h200.sm90.132sm.140gib",
    "date":"2026-12-01T20:37:33Z","strategy":"model","problems":[{"problem":"gemm|bf16|bf16|rc|M=64,N=128,K=256",
    "trials":[{"template":"gemm_tma","params":{"BLOCK_M":64,"BLOCK_N":128},"outcome":"ok","median_us":12.5,
               "sm_clock_mhz":1485,"power_w":692.5,"sm_clock_counted_mhz":1440},
              {"template":"gemm_tma","params":{"BLOCK_M":128,"BLOCK_N":128},"outcome":"compile_error","median_us":0}]}]})";
  auto sets = parse_trials(text, "x.json");
  ASSERT_TRUE(sets) << sets.error().message;
  ASSERT_EQ(sets->size(), 1u);
  const TrialSet& s = (*sets)[0];
  EXPECT_EQ(s.strategy, "model");
  EXPECT_EQ(s.source, "x.json");
  EXPECT_EQ(s.device_class, "nvidia-h200.sm90.132sm.140gib");
  EXPECT_EQ(s.problem.dim("K"), 256);
  ASSERT_EQ(s.trials.size(), 2u);
  EXPECT_EQ(s.trials[0].params.at("BLOCK_N"), 128);
  EXPECT_EQ(s.trials[1].outcome, Outcome::compile_error);
  EXPECT_EQ(s.trials[0].sm_clock_mhz, 1485);  // read while timed, where recorded
  EXPECT_DOUBLE_EQ(s.trials[0].power_w, 692.5);
  EXPECT_EQ(s.trials[1].sm_clock_mhz, 0);
  EXPECT_EQ(s.trials[0].sm_clock_counted_mhz, 1440);
  EXPECT_EQ(s.trials[1].sm_clock_counted_mhz, 0);
}

TEST(ReportParse, RefusesWhatIsNotATrialsFile) {
  EXPECT_FALSE(parse_trials("not json", "a"));
  EXPECT_FALSE(parse_trials(R"({"ktune_table":1,"winners":[]})", "b"));  // a table, not trials
  auto bad_key = parse_trials(R"({"problems":[{"problem":"gemm|bf16","trials":[]}]})", "c");
  ASSERT_FALSE(bad_key);
  EXPECT_NE(bad_key.error().message.find("c: problems[0]"), std::string::npos);
  EXPECT_FALSE(parse_trials(R"({"problems":[{"problem":"gemm|bf16|bf16|rc|M=1,N=1,K=1",
      "trials":[{"template":"t","params":{},"outcome":"ok","median_us":0}]}]})",
                            "d"));
  EXPECT_FALSE(parse_trials(R"({"problems":[{"problem":"gemm|bf16|bf16|rc|M=1,N=1,K=1",
      "trials":[{"template":"t","params":{},"outcome":"exploded","median_us":1}]}]})",
                            "e"));
}

TEST(ReportParse, GroupsStoreRecordsByProblemInTimeOrder) {
  std::vector<TrialRecord> records;
  auto rec = [](const Problem& p, std::int64_t ts, Outcome o, double us) {
    TrialRecord r;
    r.device = testing::h200();
    r.problem = p;
    r.template_name = "gemm";
    r.params = {{"BLOCK_M", ts}};
    r.outcome = o;
    r.median_us = us;
    r.timestamp = ts;
    return r;
  };
  const Problem a = testing::gemm_problem(128, 128, 128), b = testing::gemm_problem(256, 256, 256);
  records.push_back(rec(a, 30, Outcome::ok, 3));
  records.back().sm_clock_mhz = 1755;
  records.back().power_w = 612.5;
  records.back().sm_clock_counted_mhz = 1701;
  records.push_back(rec(b, 10, Outcome::ok, 1));
  records.push_back(rec(a, 20, Outcome::ok, 2));
  records.push_back(rec(a, 40, Outcome::in_flight, 0));
  // `ok` with no believable time (a peer's or an old writer's): dropped. One such record drew a
  // log axis from 0, and /report looped 2^31 times filling memory.
  for (double us : {0.0, -1.0, std::nan(""), double(INFINITY)})
    records.push_back(rec(a, 50, Outcome::ok, us));
  const auto sets = trial_sets_from_records(records);
  ASSERT_EQ(sets.size(), 2u);
  const TrialSet& sa = sets[0].problem == a ? sets[0] : sets[1];
  ASSERT_EQ(sa.trials.size(), 2u);  // the in-flight and implausible records are dropped
  EXPECT_EQ(sa.trials[0].params.at("BLOCK_M"), 20);
  EXPECT_EQ(sa.trials[1].params.at("BLOCK_M"), 30);
  EXPECT_EQ(sa.trials[1].sm_clock_mhz, 1755);
  EXPECT_EQ(sa.trials[1].sm_clock_counted_mhz, 1701);
  EXPECT_DOUBLE_EQ(sa.trials[1].power_w, 612.5);
  EXPECT_EQ(sa.source, "store");
}

// Labels sit at or below their point: 30 memory-bound points low on the plot ran their labels
// past the svg's bottom (15 of 30 were invisible). The svg grows to hold the last one.
TEST(ReportRender, RooflineLabelsLowOnThePlotStayInsideTheSvg) {
  std::vector<RooflinePoint> points;
  for (int i = 0; i < 30; ++i)
    points.push_back({.label = "rmsnorm rows=" + std::to_string(64 << (i % 8)),
                      .op = "rmsnorm",
                      .intensity = 0.3 + 0.01 * i,
                      .tflops = 0.5 + 0.01 * i,
                      .gbps = 1500,
                      .where = "test",
                      .device = "nvidia-h200"});
  const std::string svg = roofline_svg(points, h200_ceilings());
  std::smatch m;
  ASSERT_TRUE(std::regex_search(svg, m, std::regex("height=\"(\\d+)\"")));
  const double height = std::stod(m[1]);
  double lowest = 0;
  int labels = 0;
  const std::regex label("<text class=\"plabel\" x=\"\\d+\" y=\"([0-9.]+)\"");
  for (auto it = std::sregex_iterator(svg.begin(), svg.end(), label); it != std::sregex_iterator();
       ++it, ++labels)
    lowest = std::max(lowest, std::stod((*it)[1]));
  EXPECT_EQ(labels, 30);
  EXPECT_GT(lowest, 420) << "the case this test is about: labels below the plot";
  EXPECT_LE(lowest + 4, height);
}

// A winner of a GPU the ceilings were not measured on is listed beside the roofline, not drawn
// against the H200's roofs (its "% of roof" was wrong).
TEST(ReportRender, WinnersOfOtherGpusAreNotDrawnAgainstTheH200Roofs) {
  ReportInput in;
  in.generated_at = "";
  in.winners.push_back(testing::winner(testing::gemm_problem(8192, 8192, 8192), 1500));
  WinnerRecord h100 = testing::winner(testing::gemm_problem(4096, 4096, 4096), 200);
  h100.device = DeviceClass{"NVIDIA H100 80GB HBM3", 90, 132, 80};
  in.winners.push_back(h100);
  const std::string page = render(in);
  EXPECT_EQ(count(page, "<circle class=\"point\""), 1u);
  EXPECT_EQ(count(page, "<table class=\"others\">"), 1u);
  EXPECT_NE(page.find("<td>nvidia-h100-80gb-hbm3.sm90.132sm.80gib</td><td>gemm M=4096 N=4096 "
                      "K=4096</td>"),
            std::string::npos);
}

// A time that reaches the plots unchecked (a trial set built by hand, a file's zero) is left off
// the log axes instead of drawing at NaN, and a heatmap cell with no time to compare takes the
// far colour.
TEST(ReportRender, ATrialTimedAtZeroStillRenders) {
  TrialSet s = set_of({ok(128, 256, 4, 8, 610), ok(256, 128, 4, 8, 600)});
  s.trials[1].median_us = 0;
  ReportInput in;
  in.trial_sets.push_back(s);
  const std::string page = render(in);
  EXPECT_LT(page.size(), 1u << 20);
  EXPECT_NE(page.find("</html>"), std::string::npos);
  EXPECT_EQ(count(page, "<circle class=\"improve\""), 1u) << "the 610 us trial, not the zero";
  EXPECT_EQ(time_colour(std::nan("")), time_colour(4.0));
}

// Without a table entry the best trials stand in, each with the clock and power it was timed at
// where recorded.
TEST(ReportRender, BestTrialsSayTheClockAndPowerTheyRanAt) {
  TrialSet s = set_of({ok(128, 256, 4, 8, 610), ok(256, 128, 4, 8, 600), ok(64, 64, 3, 1, 900)});
  s.trials[1].sm_clock_mhz = 1485;
  s.trials[1].power_w = 691.6;
  ReportInput in;
  in.trial_sets.push_back(s);
  const std::string page = render(in);
  EXPECT_EQ(count(page, "SM clock, power"), 1u);
  EXPECT_EQ(count(page, "1485 MHz, 692 W"), 1u);
  EXPECT_EQ(count(page, " MHz, "), 1u) << "nothing for the trials without a reading";
  // Where the worker counted the clock, that one first, NVML's beside it.
  s.trials[0].sm_clock_mhz = 1980;
  s.trials[0].power_w = 700;
  s.trials[0].sm_clock_counted_mhz = 1500;
  in.trial_sets = {s};
  EXPECT_EQ(count(render(in), "1500 MHz counted (NVML 1980), 700 W"), 1u);
}

TEST(ReportRender, DrawsOneMarkPerDatum) {
  // 2 BLOCK_M x 3 BLOCK_N x 2 STAGES tiles, each measured with two GROUP_M values: 12 cells.
  std::vector<Trial> trials;
  double us = 900;
  for (std::int64_t stages : {3, 4})
    for (std::int64_t bm : {64, 128})
      for (std::int64_t bn : {64, 128, 256})
        for (std::int64_t group : {1, 8})
          trials.push_back(ok(bm, bn, stages, group, us -= 7 * ((bm + bn + group) % 5)));
  // Failures: two in a cell that also has ok configs, one alone in a new cell (BLOCK_M=256).
  trials.push_back(failed(64, 64, 3, Outcome::compile_error));
  trials.push_back(failed(64, 64, 3, Outcome::wrong_result));
  trials.push_back(failed(256, 64, 4, Outcome::resource_error));
  ReportInput in;
  in.generated_at = "";
  in.trial_sets.push_back(set_of(trials));
  TrialSet second =
      set_of({ok(64, 64, 3, 1, 950), ok(128, 128, 3, 1, 800), ok(128, 256, 4, 1, 810)}, "random");
  in.trial_sets.push_back(second);
  // Winners: two GEMMs (roofline points), softmax (a point and a bandwidth bar), transpose (a
  // bandwidth bar only: no FLOPs).
  in.winners.push_back(testing::winner(testing::gemm_problem(8192, 8192, 8192), 1500));
  in.winners.push_back(testing::winner(testing::gemm_problem(16, 4096, 4096), 15));
  for (const char* op : {"softmax", "transpose"}) {
    WinnerRecord w = testing::winner(testing::gemm_problem(1, 1, 1), 100);
    w.problem = Problem{op, "bf16", "bf16", "", {{"rows", 4096}, {"cols", 4096}}};
    w.ranked[0].tflops = 0;
    w.ranked[0].gbps = 3000;
    in.winners.push_back(w);
  }
  const std::string page = render(in);

  // The cells: distinct (STAGES, BLOCK_M, BLOCK_N) with an ok trial, over both searches.
  std::set<std::tuple<std::int64_t, std::int64_t, std::int64_t>> cells, failure_cells;
  for (const auto& set : in.trial_sets)
    for (const Trial& t : set.trials) {
      const auto key =
          std::tuple{t.params.at("STAGES"), t.params.at("BLOCK_M"), t.params.at("BLOCK_N")};
      (t.outcome == Outcome::ok ? cells : failure_cells).insert(key);
    }
  EXPECT_EQ(count(page, "<rect class=\"cell\""), cells.size());
  EXPECT_EQ(count(page, "<rect class=\"empty\""), 1u);  // the failure-only cell
  EXPECT_EQ(count(page, "<text class=\"fail"), failure_cells.size());
  EXPECT_EQ(count(page, "<circle class=\"improve\""),
            improvements(in.trial_sets[0]) + improvements(in.trial_sets[1]));
  EXPECT_EQ(count(page, "<path class=\"curve\""), 2u);
  // 2 GEMM winners, softmax, and the best trial of the problem known only from trials.
  EXPECT_EQ(count(page, "<circle class=\"point\""), 4u);
  EXPECT_EQ(count(page, "<text class=\"plabel\""), 4u);  // each point labelled
  EXPECT_EQ(count(page, "<rect class=\"bw\""), 2u);      // softmax, transpose
  // One heatmap panel per STAGES value (one template), and every problem has its section.
  EXPECT_EQ(count(page, "<svg class=\"heatmap\""), 2u);
  EXPECT_EQ(count(page, "<section class=\"problem\""), 5u);
  // The ceilings' source is stated.
  EXPECT_NE(page.find("GPU.md"), std::string::npos);
  EXPECT_NE(page.find("4.25 TB/s"), std::string::npos);
}

// A winner's provenance line says how its medians were timed (flushed and rotated medians do not
// compare), and says nothing of it for records older than the field.
TEST(ReportRender, ProvenanceSaysHowTheMediansWereTimed) {
  ReportInput in;
  in.generated_at = "";
  WinnerRecord flushed = testing::winner(testing::gemm_problem(4096, 4096, 4096), 990);
  flushed.timing_l2 = TimingL2::flushed;
  WinnerRecord old = testing::winner(testing::gemm_problem(512, 512, 512), 20);
  in.winners = {flushed, old};
  const std::string page = render(in);
  EXPECT_EQ(count(page, "L2 flushed between timed launches"), 1u);
  EXPECT_EQ(count(page, "between timed launches"), 1u) << "nothing for the record without it";
  in.winners[0].timing_l2 = TimingL2::rotated;
  EXPECT_EQ(count(render(in), "L2 rotated between timed launches"), 1u);
}

TEST(ReportRender, EscapesHostileText) {
  const std::string evil = "<script>alert(1)</script>\"'&<img src=x onerror=alert(2)>";
  ReportInput in;
  in.title = evil;
  TrialSet s = set_of({ok(64, 64, 3, 1, 10)});
  s.source = evil;
  s.strategy = evil;
  s.trials[0].template_name = evil;
  in.trial_sets.push_back(s);
  WinnerRecord w = testing::winner(testing::gemm_problem(512, 512, 512), 20, evil);
  w.strategy = evil;
  w.ranked[0].template_name = evil;
  in.winners.push_back(w);
  in.misses = nlohmann::json{{"top",
                              {{{"problem", evil},
                                {"device", evil},
                                {"count", 3},
                                {"worth_us", 50.0},
                                {"reason", evil}}}}};
  in.jobs = nlohmann::json{{"jobs",
                            {{{"id", evil},
                              {"state", evil},
                              {"problem", evil},
                              {"lane", 0},
                              {"started", 100},
                              {"finished", 200}}}}};
  in.status = nlohmann::json{{"node_id", evil}, {"gpus", nlohmann::json::array()}};
  const std::string page = render(in);
  EXPECT_EQ(count(page, "<script>"), 1u);  // the page's own
  EXPECT_EQ(page.find("<img"), std::string::npos);
  EXPECT_EQ(page.find("alert(1)</script>"), std::string::npos);
  EXPECT_NE(page.find("&lt;script&gt;alert(1)&lt;/script&gt;&quot;&#39;&amp;&lt;img"),
            std::string::npos);
  EXPECT_EQ(escape_html("a<b>&\"'"), "a&lt;b&gt;&amp;&quot;&#39;");
}

TEST(ReportRender, StaysSmallForTenThousandConfigs) {
  // A 10,000-config search over a realistic space (5 templates, 6 tile sizes a side, 6 stage
  // counts, other params collapsed into the cells), in random order, 5 % failures.
  std::mt19937 rng(7);
  std::vector<Trial> trials;
  const std::int64_t tiles[] = {32, 64, 96, 128, 192, 256};
  const Outcome failures[] = {Outcome::compile_error, Outcome::resource_error,
                              Outcome::wrong_result, Outcome::crash, Outcome::timeout};
  for (int i = 0; i < 10'000; ++i) {
    Trial t;
    t.template_name = "gemm_t" + std::to_string(rng() % 5);
    t.params = {{"BLOCK_M", tiles[rng() % 6]},
                {"BLOCK_N", tiles[rng() % 6]},
                {"STAGES", std::int64_t(2 + rng() % 6)},
                {"GROUP_M", std::int64_t(rng() % 16)},
                {"SPLIT_K", std::int64_t(1 + rng() % 8)}};
    if (rng() % 20 == 0) {
      t.outcome = failures[rng() % 5];
    } else {
      t.median_us = 1000 + double(rng() % 100'000) / 10;
    }
    trials.push_back(std::move(t));
  }
  ReportInput in;
  in.trial_sets.push_back(set_of(trials, "random"));
  in.winners.push_back(testing::winner(testing::gemm_problem(4096, 4096, 4096), 990));
  const std::string page = render(in);
  // 24 panels x 36 cells at most, whatever the trial count.
  EXPECT_LE(count(page, "<rect class=\"cell\""), 24u * 36u);
  EXPECT_EQ(count(page, "<svg class=\"heatmap\""), 24u);
  EXPECT_NE(page.find("the 24 panels holding the fastest configs shown of 30"), std::string::npos);
  EXPECT_EQ(count(page, "<circle class=\"improve\""), improvements(in.trial_sets[0]));
  std::fprintf(stderr, "report for 10,000 configs: %zu bytes\n", page.size());
  EXPECT_LT(page.size(), 400'000u);
}

TEST(ReportRender, RendersTheCommittedH200Results) {
  ReportInput in;
  for (const char* file : {"/bench/results/gemm-tma-pingpong-h200-20261201-run1-trials.json",
                           "/bench/data/h200_gemm_sweep.json"}) {
    auto sets = parse_trials(read_file(std::string(KTUNE_SOURCE_DIR) + file), file);
    ASSERT_TRUE(sets) << sets.error().message;
    for (auto& s : *sets) in.trial_sets.push_back(std::move(s));
  }
  std::vector<ImportRejection> rejected;
  auto winners =
      parse_table(read_file(std::string(KTUNE_SOURCE_DIR) + "/tables/h200.json"), "h200", rejected);
  ASSERT_TRUE(winners);
  ASSERT_TRUE(rejected.empty());
  in.winners = *winners;
  const std::string page = render(in);
  size_t trials = 0;
  for (const auto& s : in.trial_sets) trials += s.trials.size();
  EXPECT_GT(trials, 2000u);
  std::set<std::string> problems;
  for (const auto& w : in.winners) problems.insert(w.problem.key());
  for (const auto& s : in.trial_sets) problems.insert(s.problem.key());
  EXPECT_EQ(count(page, "<section class=\"problem\""), problems.size());
  // Every problem is on the roofline (a table winner, else its best recorded trial) or, for
  // transpose, only on the bandwidth chart.
  std::set<std::string> transposes;
  for (const auto& w : in.winners)
    if (w.problem.op == "transpose") transposes.insert(w.problem.key());
  EXPECT_EQ(count(page, "<circle class=\"point\""), problems.size() - transposes.size());
  EXPECT_EQ(count(page, "<rect class=\"bw\""), 5u);
  std::fprintf(stderr, "H200 report: %zu bytes for %zu trials\n", page.size(), trials);
  EXPECT_LT(page.size(), 600'000u);
}

TEST(ReportRender, NodeSectionDrawsMissesJobsAndLanes) {
  ReportInput in;
  in.winners.push_back(testing::winner(testing::gemm_problem(512, 512, 512), 20));
  nlohmann::json top = nlohmann::json::array();
  for (int i = 0; i < 3; ++i)
    top.push_back({{"problem", "gemm|bf16|bf16|rc|M=" + std::to_string(64 << i) + ",N=64,K=64"},
                   {"device", "nvidia-h200.sm90.132sm.140gib"},
                   {"count", 10 - i},
                   {"worth_us", 100.0 * (3 - i)},
                   {"reason", "no winner"}});
  in.misses = {{"top", top}, {"total", 27}, {"distinct", 3}};
  // Two jobs ran (on lanes 0 and 1), one is still queued (no bar).
  in.jobs = {
      {"jobs",
       {{{"id", "a"}, {"state", "done"}, {"lane", 0}, {"started", 1000}, {"finished", 1100}},
        {{"id", "b"}, {"state", "failed"}, {"lane", 1}, {"started", 1050}, {"finished", 1060}},
        {{"id", "c"}, {"state", "queued"}, {"lane", -1}, {"started", 0}, {"finished", 0}}}},
      {"counts", {{"done", 1}, {"failed", 1}, {"queued", 1}}}};
  const std::string page = render(in);
  EXPECT_EQ(count(page, "<rect class=\"miss\""), 3u);
  EXPECT_EQ(count(page, "<rect class=\"job "), 2u);
  EXPECT_EQ(count(page, "<rect class=\"job failed\""), 1u);
  EXPECT_NE(page.find(">lane 0</text>"), std::string::npos);
  EXPECT_NE(page.find(">lane 1</text>"), std::string::npos);
  EXPECT_EQ(count(page, "<tr><td>c</td>"), 1u);  // the queued job is in the table
}

TEST(ReportRender, DrawsOneCurvePerReplayedStrategy) {
  const std::string text =
      read_file(std::string(KTUNE_SOURCE_DIR) + "/bench/results/replay-h200-gemm-20261129.json");
  ASSERT_TRUE(is_replay_file(text));
  EXPECT_FALSE(is_replay_file(R"({"problems":[]})"));
  auto replays = parse_replay(text, "replay.json");
  ASSERT_TRUE(replays) << replays.error().message;
  ASSERT_EQ(replays->size(), 2u);
  EXPECT_EQ((*replays)[0].seeds, 9);
  EXPECT_EQ((*replays)[0].configs, 1011u);
  ReportInput in;
  in.replays = *replays;
  size_t curves = 0;
  for (const auto& r : in.replays) curves += r.curves.size();
  EXPECT_EQ(curves, 8u);  // exhaustive, random, anneal, model on two problems
  const std::string page = render(in);
  EXPECT_EQ(count(page, "<path class=\"replaycurve\""), curves);
  EXPECT_EQ(count(page, "<section class=\"problem\""), 2u);
  EXPECT_FALSE(
      parse_replay(R"({"benchmark":"replay","problems":[{"problem":"gemm|bf16|bf16|rc|M=1,N=1,K=1",
      "strategies":{"model":{"median_fraction":[]}}}]})",
                   "empty"));
}

TEST(ReportFilter, KeepsOneOpAndDevice) {
  ReportInput in;
  in.trial_sets.push_back(set_of({ok(64, 64, 3, 1, 10)}));
  in.winners.push_back(testing::winner(testing::gemm_problem(512, 512, 512), 20));
  WinnerRecord soft = testing::winner(testing::gemm_problem(1, 1, 1), 100);
  soft.problem = Problem{"softmax", "bf16", "bf16", "", {{"rows", 8}, {"cols", 8}}};
  in.winners.push_back(soft);
  ReportInput by_op = in;
  apply_filter(by_op, Filter{.device = "", .op = "softmax"});
  EXPECT_EQ(by_op.winners.size(), 1u);
  EXPECT_TRUE(by_op.trial_sets.empty());
  ReportInput by_device = in;
  apply_filter(by_device, Filter{.device = "h100", .op = ""});
  EXPECT_TRUE(by_device.winners.empty());
  apply_filter(in, Filter{.device = "h200", .op = "gemm"});
  EXPECT_EQ(in.winners.size(), 1u);
  EXPECT_EQ(in.trial_sets.size(), 1u);
}

}  // namespace
}  // namespace ktune::report
