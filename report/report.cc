// The page: header and sources, roofline, one section per problem, the node's view.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <limits>
#include <map>
#include <set>

#include "report/draw.h"

namespace ktune::report {

using nlohmann::json;

namespace {

constexpr const char* k_style = R"(
body{font:14px/1.4 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:0 auto;max-width:1240px;padding:0 18px 40px;color:#1b1b1b}
h1{font-size:22px;margin:18px 0 2px}h2{font-size:18px;margin:28px 0 6px;border-bottom:1px solid #ddd}
h3{font-size:15px;margin:14px 0 4px}.meta,.note{color:#555;font-size:12px}
table{border-collapse:collapse;margin:4px 0 8px;font-size:12.5px}td,th{padding:2px 8px;border-bottom:1px solid #eee;text-align:left;vertical-align:top}
th{background:#f5f5f5}td.n{text-align:right;font-variant-numeric:tabular-nums}tr.win td{font-weight:600}
nav a{margin-right:10px;font-size:13px}.panels{display:flex;flex-wrap:wrap;gap:6px 14px}
svg text{font:10.5px system-ui,sans-serif;fill:#333}svg .ptitle{font-weight:600}svg .axis{font-size:11.5px;fill:#111}
svg .grid{stroke:#e6e6e6}svg .empty{fill:#f1f1f1}svg .fail{font-weight:700;font-size:13px;fill:#c00}svg .fail.small{font-size:9px}
svg .curve,svg .replaycurve{fill:none;stroke-width:1.6}svg .winner{stroke:#888;stroke-dasharray:4 3}
svg .roof{fill:none;stroke:#111;stroke-width:2}svg .roof2{stroke:#777;stroke-dasharray:5 3}svg .roofkey{font-size:11px;fill:#111}
svg .leader{stroke:#bbb;stroke-width:.7}svg .point{stroke:#fff;stroke-width:1}svg .plabel{font-size:10.5px}
svg .bw{fill:#3b82c4}svg .miss{fill:#d97706}svg .job{fill:#2ca02c}svg .job.failed{fill:#d62728}svg .job.cancelled{fill:#999}
.problem{margin-bottom:10px}.two{display:flex;flex-wrap:wrap;gap:18px;align-items:flex-start}
#report-errors{color:#c00;white-space:pre-wrap}.left-out{color:#c00}
)";

// Records script errors in the page itself (a browser test reads them from the DOM) and marks
// that the script ran; counts the marks a reader may want to check against the data.
constexpr const char* k_script = R"(
window.addEventListener('error',function(e){var d=document.getElementById('report-errors');if(d)d.textContent+=String(e.message)+'\n';});
document.addEventListener('DOMContentLoaded',function(){var c={};['cell','fail','improve','point','bw','miss','job'].forEach(function(k){c[k]=document.querySelectorAll('svg .'+k).length;});document.body.setAttribute('data-marks',JSON.stringify(c));document.body.setAttribute('data-script','ran');});
)";

std::string td(const std::string& text) {
  return "<td>" + escape_html(text) + "</td>";
}
std::string tdn(const std::string& text) {
  return "<td class=\"n\">" + escape_html(text) + "</td>";
}
// A trial's clock and power: the counted clock first where the worker counted one (NVML's can
// describe the GPU before a short timing), NVML's reading beside it.
std::string clock_and_power(const Trial& t) {
  if (t.sm_clock_counted_mhz > 0 && t.sm_clock_mhz > 0)
    return strf("%d MHz counted (NVML %d), %.0f W", t.sm_clock_counted_mhz, t.sm_clock_mhz,
                t.power_w);
  if (t.sm_clock_counted_mhz > 0) return strf("%d MHz counted", t.sm_clock_counted_mhz);
  return t.sm_clock_mhz > 0 ? strf("%d MHz, %.0f W", t.sm_clock_mhz, t.power_w) : "";
}
std::string th_row(std::initializer_list<const char*> names) {
  std::string s = "<tr>";
  for (const char* n : names) s += std::string("<th>") + n + "</th>";
  return s + "</tr>";
}

// A problem on a device class: the page's unit.
struct ProblemKey {
  std::string device;
  std::string op;
  std::string key;
  auto operator<=>(const ProblemKey&) const = default;
};

struct ProblemView {
  Problem problem;
  std::vector<const TrialSet*> sets;
  std::vector<const ReplayCurves*> replays;
  const WinnerRecord* winner = nullptr;
};

std::string anchor_id(const ProblemKey& k) {
  std::string s = "p-";
  for (char c : k.device + "-" + k.key) s += std::isalnum(static_cast<unsigned char>(c)) ? c : '-';
  return s;
}

std::string winner_table(const WinnerRecord& w) {
  std::string s = "<table>" + th_row({"rank", "template", "params", "median us", "spread %",
                                      "TFLOP/s", "GB/s", "vs best"});
  const double best = w.ranked.empty() ? 0 : w.ranked[0].median_us;
  for (size_t i = 0; i < w.ranked.size(); ++i) {
    const RankedConfig& r = w.ranked[i];
    s += std::string(i == 0 ? "<tr class=\"win\">" : "<tr>") + tdn(std::to_string(i + 1)) +
         td(r.template_name) + td(params_text(r.params)) + tdn(num(r.median_us)) +
         tdn(num(r.spread_pct)) + tdn(r.tflops > 0 ? num(r.tflops) : "") +
         tdn(r.gbps > 0 ? num(r.gbps) : "") +
         tdn(best > 0 ? strf("%.3fx", r.median_us / best) : "") + "</tr>";
  }
  s += "</table>";
  std::string prov = "provenance: exact winner of the table, device " + w.device.id() + ", node " +
                     w.node_id + ", strategy " + w.strategy + ", " + std::to_string(w.trials) +
                     " trials, measured " + utc_text(w.timestamp) + "; driver " +
                     w.validators.driver + ", NVRTC " + w.validators.nvrtc;
  if (w.sm_clock_mhz > 0)
    prov += strf(", SM %d MHz, memory %d MHz, %.0f W", w.sm_clock_mhz, w.mem_clock_mhz, w.power_w);
  if (w.timing_l2 != TimingL2::unknown)  // medians timed otherwise are not comparable
    prov += std::string(", L2 ") + std::string(to_string(w.timing_l2)) + " between timed launches";
  prov += strf(", reference error %.2g", w.ref_error);
  return s + "<p class=\"meta\">" + escape_html(prov) + "</p>";
}

// Without a table entry: the best recorded trials stand in as winner and runners-up.
std::string best_trials_table(const std::vector<const TrialSet*>& sets, size_t n) {
  struct Row {
    const TrialSet* set;
    size_t index;
  };
  std::vector<Row> rows;
  for (const TrialSet* set : sets)
    for (size_t i = 0; i < set->trials.size(); ++i)
      if (set->trials[i].outcome == Outcome::ok) rows.push_back({set, i});
  if (rows.empty()) return "";
  std::stable_sort(rows.begin(), rows.end(), [](const Row& a, const Row& b) {
    return a.set->trials[a.index].median_us < b.set->trials[b.index].median_us;
  });
  if (rows.size() > n) rows.resize(n);
  const double best = rows[0].set->trials[rows[0].index].median_us;
  std::string s = "<table>" + th_row({"rank", "template", "params", "median us", "TFLOP/s",
                                      "vs best", "SM clock, power", "provenance"});
  for (size_t i = 0; i < rows.size(); ++i) {
    const TrialSet& set = *rows[i].set;
    const Trial& t = set.trials[rows[i].index];
    const Work work = gemm_work(set.problem);
    s += std::string(i == 0 ? "<tr class=\"win\">" : "<tr>") + tdn(std::to_string(i + 1)) +
         td(t.template_name) + td(params_text(t.params)) + tdn(num(t.median_us)) +
         tdn(work.flops > 0 ? num(work.flops / t.median_us / 1e6) : "") +
         tdn(strf("%.3fx", t.median_us / best)) + td(clock_and_power(t)) +
         td("recorded trial " + std::to_string(rows[i].index + 1) + " of " + set.source + " (" +
            set.strategy + ", " + set.date + ")") +
         "</tr>";
  }
  return s + "</table>";
}

std::string outcome_summary(const std::vector<const TrialSet*>& sets) {
  std::map<std::string, size_t> counts;
  size_t total = 0;
  for (const TrialSet* set : sets)
    for (const Trial& t : set->trials) ++counts[std::string(to_string(t.outcome))], ++total;
  std::string s = std::to_string(total) + " measured configs in " + std::to_string(sets.size()) +
                  " recorded search" + (sets.size() == 1 ? "" : "es") + ":";
  for (const auto& [name, n] : counts) s += " " + std::to_string(n) + " " + name;
  return s;
}

std::string problem_section(const ProblemKey& key, const ProblemView& v) {
  std::string s = "<section class=\"problem\" id=\"" + anchor_id(key) + "\"><h2>" +
                  escape_html(v.problem.op + " " + v.problem.dtype + " " + v.problem.layout + " " +
                              dims_text(v.problem)) +
                  "</h2><p class=\"meta\">" + escape_html(key.device + " \u00b7 " + key.key) +
                  "</p>";
  s += "<h3>Winner and runners-up</h3>";
  if (v.winner)
    s += winner_table(*v.winner);
  else if (!v.sets.empty())
    s += "<p class=\"meta\">not in the winners table; the best recorded trials:</p>" +
         best_trials_table(v.sets, 5);
  if (!v.sets.empty()) {
    s += "<p class=\"meta\">" + escape_html(outcome_summary(v.sets)) + "</p>";
    if (v.winner && !v.winner->ranked.empty()) {
      // Recorded searches newer than the table can beat its winner: say so.
      double best = 0;
      std::string what;
      for (const TrialSet* set : v.sets)
        for (const Trial& t : set->trials)
          if (t.outcome == Outcome::ok && (best == 0 || t.median_us < best))
            best = t.median_us,
            what = t.template_name + " " + params_text(t.params) + " in " + set->source;
      const double table_us = v.winner->ranked[0].median_us;
      if (best > 0 && best < table_us)
        s += "<p class=\"meta\">" +
             escape_html(strf("the best recorded trial is %.2fx faster than the table's winner: ",
                              table_us / best) +
                         num(best) + " us, " + what) +
             "</p>";
    }
    s += "<div class=\"two\"><div><h3>Measured configs</h3>" + heatmap_html(v.sets) +
         "</div><div><h3>Convergence</h3>" +
         convergence_svg(
             v.sets, v.winner && !v.winner->ranked.empty() ? v.winner->ranked[0].median_us : 0) +
         "</div></div>";
  } else if (v.replays.empty()) {
    s += "<p class=\"note\">no recorded trials for this problem (pass its trials file with "
         "--trials)</p>";
  }
  for (const ReplayCurves* r : v.replays)
    s += "<h3>Strategies replayed on the recorded sweep</h3><p class=\"meta\">" +
         escape_html(r->source + ": " + std::to_string(r->configs) + " configs of " + r->data +
                     ", best " + num(r->best_us) + " us; median over " + std::to_string(r->seeds) +
                     " seeds") +
         "</p>" + replay_svg(*r);
  return s + "</section>";
}

// A point for each table winner, and for each problem known only from trials, its best trial.
std::vector<RooflinePoint> roofline_points(const std::map<ProblemKey, ProblemView>& views) {
  std::vector<RooflinePoint> points;
  for (const auto& [key, v] : views) {
    RooflinePoint p;
    p.device = key.device;
    p.op = v.problem.op;
    p.label = v.problem.op + " " + dims_text(v.problem);
    double us = 0;
    if (v.winner && !v.winner->ranked.empty()) {
      const RankedConfig& r = v.winner->ranked[0];
      us = r.median_us;
      p.gbps = r.gbps;
      p.where =
          "table winner " + r.template_name + " " + params_text(r.params) + " on " + key.device;
    } else {
      for (const TrialSet* set : v.sets)
        for (const Trial& t : set->trials)
          if (t.outcome == Outcome::ok && (us == 0 || t.median_us < us)) {
            us = t.median_us;
            p.where = "best recorded trial " + t.template_name + " " + params_text(t.params) +
                      " (" + set->source + ")";
          }
      p.label += " (trials)";
    }
    if (us <= 0) continue;
    const Work gemm = gemm_work(v.problem);
    if (gemm.flops > 0) {
      p.intensity = gemm.flops / gemm.bytes;
      p.tflops = gemm.flops / us / 1e6;
    } else if (p.gbps > 0) {
      double elements = 1;
      for (const auto& [_, d] : v.problem.dims) elements *= double(d);
      const double bytes = p.gbps * 1e3 * us;  // GB/s x us
      const double fpe = flops_per_element(v.problem.op);
      if (fpe > 0) {
        p.intensity = fpe * elements / bytes;
        p.tflops = fpe * elements / us / 1e6;
      }
    }
    if (p.tflops > 0 || p.gbps > 0) points.push_back(std::move(p));
  }
  return points;
}

std::string roofline_section(const std::vector<RooflinePoint>& all, const Ceilings& c) {
  // Only the device classes the ceilings were measured on are drawn against them (an H100's
  // winners against the H200's roofs read as a wrong "% of roof").
  std::vector<RooflinePoint> points, others;
  for (const auto& p : all)
    (p.device.find(c.device) != std::string::npos ? points : others).push_back(p);
  std::string s = "<section id=\"roofline\"><h2>Roofline of the winners</h2>";
  s += roofline_svg(points, c);
  if (!others.empty()) {
    s += "<h3>Winners of GPUs without measured ceilings</h3><p class=\"note\">Not drawn against "
         "the roofs above, which hold for " +
         escape_html(c.device) +
         " only.</p><table class=\"others\"><tr><th>device class</th>"
         "<th>problem</th><th>TFLOP/s</th><th>GB/s</th><th>what</th></tr>";
    for (const auto& p : others)
      s += "<tr>" + td(p.device) + td(p.label) + tdn(p.tflops > 0 ? num(p.tflops) : "") +
           tdn(p.gbps > 0 ? num(p.gbps) : "") + td(p.where) + "</tr>";
    s += "</table>";
  }
  s += "<p class=\"note\">Ceilings: " + escape_html(c.source) +
       ". GEMM work is 2&#183;M&#183;N&#183;K FLOPs over the bytes of A, B and C read or "
       "written once; the memory-bound ops are placed by their measured GB/s and a nominal "
       "FLOP count per element (softmax 5, layernorm 8, rmsnorm 4, reduce_sum 1); transpose "
       "moves data only and appears in the bandwidth chart alone.</p>";
  const std::string bw = bandwidth_svg(points, c);
  if (!bw.empty()) s += "<h3>Achieved bandwidth of the memory-bound winners</h3>" + bw;
  return s + "</section>";
}

std::string winners_by_op(const std::vector<WinnerRecord>& winners) {
  std::map<std::string, std::map<std::string, size_t>> counts;  // device -> op -> n
  std::set<std::string> ops;
  for (const auto& w : winners) ++counts[w.device.id()][w.problem.op], ops.insert(w.problem.op);
  if (counts.empty()) return "<p class=\"note\">no winners</p>";
  std::string s = "<table><tr><th>device class</th>";
  for (const auto& op : ops) s += "<th>" + escape_html(op) + "</th>";
  s += "<th>all</th></tr>";
  for (const auto& [device, by_op] : counts) {
    size_t all = 0;
    s += "<tr>" + td(device);
    for (const auto& op : ops) {
      auto it = by_op.find(op);
      const size_t n = it == by_op.end() ? 0 : it->second;
      all += n;
      s += tdn(std::to_string(n));
    }
    s += tdn(std::to_string(all)) + "</tr>";
  }
  return s + "</table>";
}

std::string json_text(const json& j, const char* key) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return "";
  return it->is_string() ? it->get<std::string>() : it->dump();
}
double json_number(const json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_number() ? it->get<double>() : 0;
}

std::string misses_block(const json& misses) {
  const json top = misses.is_object() ? misses.value("top", json::array()) : json::array();
  std::string s = "<h3>Top misses and their worth</h3>";
  if (!top.is_array() || top.empty()) return s + "<p class=\"note\">no misses recorded</p>";
  double max_worth = 1;
  for (const auto& m : top) max_worth = std::max(max_worth, json_number(m, "worth_us"));
  const int row = 18, left = 360, bar = 300;
  const int h = row * int(top.size()) + 6, w = left + bar + 120;
  s += strf("<svg class=\"misses\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" role=\"img\">",
            w, h, w, h);
  for (size_t i = 0; i < top.size(); ++i) {
    const json& m = top[i];
    const double worth = json_number(m, "worth_us");
    const int y = int(i) * row;
    s += strf("<text class=\"tick\" x=\"%d\" y=\"%d\" text-anchor=\"end\">", left - 6, y + 12) +
         escape_html(json_text(m, "problem")) + "</text>";
    s += strf("<rect class=\"miss\" x=\"%d\" y=\"%d\" width=\"%.1f\" height=\"%d\"><title>", left,
              y + 2, std::max(1.0, bar * worth / max_worth), row - 5) +
         escape_html(json_text(m, "device") + ": " + json_text(m, "count") + " misses, " +
                     json_text(m, "reason")) +
         "</title></rect>";
    s += strf("<text class=\"tick\" x=\"%.1f\" y=\"%d\">",
              left + std::max(1.0, bar * worth / max_worth) + 4, y + 12) +
         escape_html(num(worth) + " us, " + json_text(m, "count") + " misses") + "</text>";
  }
  s += "</svg>";
  if (misses.contains("total"))
    s += "<p class=\"meta\">" +
         escape_html(json_text(misses, "total") + " misses over " + json_text(misses, "distinct") +
                     " keys; worth = expected GPU time saved by tuning the key") +
         "</p>";
  return s;
}

std::string jobs_block(const json& jobs) {
  const json list = jobs.is_object() ? jobs.value("jobs", json::array()) : json::array();
  std::string s = "<h3>Jobs and lanes</h3>";
  if (jobs.is_object() && jobs.contains("counts"))
    s += "<p class=\"meta\">" + escape_html("by state: " + jobs["counts"].dump()) + "</p>";
  if (!list.is_array() || list.empty()) return s + "<p class=\"note\">no jobs</p>";
  // Lanes over time: one row per lane, a bar from start to finish per job that ran.
  double t0 = std::numeric_limits<double>::infinity(), t1 = 0;
  std::set<std::int64_t> lanes;
  for (const auto& j : list) {
    const double started = json_number(j, "started");
    if (started <= 0) continue;
    const double end = std::max(json_number(j, "finished"), json_number(j, "updated"));
    t0 = std::min(t0, started);
    t1 = std::max({t1, end, started + 1});
    lanes.insert(std::int64_t(json_number(j, "lane")));
  }
  if (!lanes.empty()) {
    const int left = 60, width = 700, row = 20;
    const int h = row * int(lanes.size()) + 30, w = left + width + 20;
    std::string svg = strf(
        "<svg class=\"lanes\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" "
        "role=\"img\">",
        w, h, w, h);
    std::map<std::int64_t, int> lane_row;
    for (auto l : lanes) {
      const int r = int(lane_row.size());
      lane_row[l] = r;
      svg += strf("<text class=\"tick\" x=\"%d\" y=\"%d\" text-anchor=\"end\">lane %lld</text>",
                  left - 6, r * row + 14, (long long)l);
    }
    for (const auto& j : list) {
      const double started = json_number(j, "started");
      if (started <= 0) continue;
      const double end = std::max({json_number(j, "finished"), json_number(j, "updated"), started});
      const double x = left + width * (started - t0) / (t1 - t0);
      const double bw = std::max(2.0, width * (end - started) / (t1 - t0));
      const std::string state = json_text(j, "state");
      svg += strf("<rect class=\"job %s\" x=\"%.1f\" y=\"%d\" width=\"%.1f\" height=\"%d\"><title>",
                  escape_html(state).c_str(), x,
                  lane_row[std::int64_t(json_number(j, "lane"))] * row + 3, bw, row - 6) +
             escape_html(json_text(j, "id") + " " + state + " " + json_text(j, "problem") + " " +
                         json_text(j, "trials") + " trials") +
             "</title></rect>";
    }
    svg += strf(
        "<text class=\"tick\" x=\"%d\" y=\"%d\">%s</text><text class=\"tick\" x=\"%d\" "
        "y=\"%d\" text-anchor=\"end\">%s</text></svg>",
        left, h - 6, utc_text(std::int64_t(t0)).c_str(), left + width, h - 6,
        utc_text(std::int64_t(t1)).c_str());
    s += svg;
  }
  s += "<table>" + th_row({"job", "state", "problem", "device", "strategy", "trials", "best us",
                           "lane", "created", "finished", "message"});
  for (const auto& j : list)
    s += "<tr>" + td(json_text(j, "id")) + td(json_text(j, "state")) + td(json_text(j, "problem")) +
         td(json_text(j, "device")) + td(json_text(j, "strategy")) + tdn(json_text(j, "trials")) +
         tdn(num(json_number(j, "best_us"))) + tdn(json_text(j, "lane")) +
         td(utc_text(std::int64_t(json_number(j, "created")))) +
         td(utc_text(std::int64_t(json_number(j, "finished")))) + td(json_text(j, "message")) +
         "</tr>";
  return s + "</table>";
}

std::string node_section(const ReportInput& in) {
  std::string s = "<section id=\"node\"><h2>Node</h2>";
  if (in.status.is_object()) {
    const json& st = in.status;
    std::string gpus;
    for (const auto& g : st.value("gpus", json::array()))
      gpus += (gpus.empty() ? "" : ", ") + json_text(g, "device_class");
    s += "<p class=\"meta\">" +
         escape_html(
             "node " + json_text(st, "node_id") + ", ktuned " + json_text(st, "version") + ", up " +
             json_text(st, "uptime_s") + " s, store " + json_text(st, "store") +
             ", GPUs: " + (gpus.empty() ? "none" : gpus) +
             (json_text(st, "gpu_error").empty() ? "" : " (" + json_text(st, "gpu_error") + ")")) +
         "</p>";
  }
  s += "<h3>Winners by op and device class</h3>" + winners_by_op(in.winners);
  if (!in.misses.is_null()) s += misses_block(in.misses);
  if (!in.jobs.is_null()) s += jobs_block(in.jobs);
  if (in.status.is_object() && in.status.contains("lanes"))
    s += "<p class=\"meta\">" + escape_html("lanes now: " + in.status["lanes"].dump()) + "</p>";
  return s + "</section>";
}

}  // namespace

std::string render_report(const ReportInput& in) {
  std::map<ProblemKey, ProblemView> views;
  for (const auto& w : in.winners) {
    ProblemView& v = views[{w.device.id(), w.problem.op, w.problem.key()}];
    v.problem = w.problem;
    v.winner = &w;
  }
  for (const auto& set : in.trial_sets) {
    ProblemView& v = views[{set.device_class, set.problem.op, set.problem.key()}];
    v.problem = set.problem;
    v.sets.push_back(&set);
  }
  for (const auto& r : in.replays) {
    // A replay names no device class: it joins every view of its problem, or stands alone.
    bool placed = false;
    for (auto& [key, v] : views)
      if (key.key == r.problem.key()) v.replays.push_back(&r), placed = true;
    if (!placed) {
      ProblemView& v = views[{"", r.problem.op, r.problem.key()}];
      v.problem = r.problem;
      v.replays.push_back(&r);
    }
  }
  size_t trials = 0;
  std::set<std::string> sources;
  for (const auto& set : in.trial_sets) trials += set.trials.size(), sources.insert(set.source);
  for (const auto& r : in.replays) sources.insert(r.source);

  std::string page =
      "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
      "<meta name=\"viewport\" content=\"width=device-width,initial-scale=1\">"
      "<title>" +
      escape_html(in.title) + "</title><style>" + k_style + "</style><script>" + k_script +
      "</script></head><body>";
  page += "<h1>" + escape_html(in.title) + "</h1><p class=\"meta\">";
  std::string meta = std::to_string(views.size()) + " problems, " +
                     std::to_string(in.winners.size()) + " table winners, " +
                     std::to_string(trials) + " recorded trials";
  if (!sources.empty()) {
    meta += " from";
    for (const auto& src : sources) meta += " " + src;
  }
  if (!in.generated_by.empty()) meta += "; made by " + in.generated_by;
  if (!in.generated_at.empty()) meta += " at " + in.generated_at;
  page += escape_html(meta) + "</p><div id=\"report-errors\"></div>";
  for (const auto& note : in.notes) page += "<p class=\"left-out\">" + escape_html(note) + "</p>";
  page += "<nav><a href=\"#roofline\">roofline</a><a href=\"#node\">node</a>";
  for (const auto& [key, v] : views)
    page += "<a href=\"#" + anchor_id(key) + "\">" +
            escape_html(v.problem.op + " " + dims_text(v.problem)) + "</a>";
  page += "</nav>";
  page += roofline_section(roofline_points(views), in.ceilings);
  page += node_section(in);
  for (const auto& [key, v] : views) page += problem_section(key, v);
  page += "</body></html>\n";
  return page;
}

}  // namespace ktune::report
