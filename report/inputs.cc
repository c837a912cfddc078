// Reading the report's inputs: ktune-bench trials files, store trial records, filters.
#include <algorithm>
#include <map>
#include <tuple>

#include "report/report.h"

namespace ktune::report {

using nlohmann::json;

Ceilings h200_ceilings() {
  return Ceilings{
      .copy_tbps = 4.25,
      .tensor_tflops = 800,
      .mma_sync_tflops = 645,
      .source =
          "measured on the lent NVIDIA H200, 2026-11-29 (docs: GPU.md): device-to-device "
          "copy 4.22-4.25 TB/s (read + write bytes); cuBLAS bf16 GEMM 8192^3 690-800 "
          "TFLOP/s (the best run is the tensor roof); mma.sync m16n8k16 bf16 instruction "
          "ceiling 645 TFLOP/s",
      .device = "nvidia-h200"};
}

namespace {

Result<Trial> parse_trial(const json& t) {
  Trial trial;
  trial.template_name = t.value("template", "");
  if (auto p = t.find("params"); p != t.end() && p->is_object())
    for (const auto& [name, value] : p->items())
      if (value.is_number_integer()) trial.params[name] = value.get<std::int64_t>();
  auto outcome = parse_outcome(t.value("outcome", "ok"));
  if (!outcome) return std::unexpected(outcome.error());
  trial.outcome = *outcome;
  if (auto m = t.find("median_us"); m != t.end() && m->is_number())
    trial.median_us = m->get<double>();
  if (auto c = t.find("sm_clock_mhz"); c != t.end() && c->is_number_integer())
    trial.sm_clock_mhz = c->get<int>();
  if (auto w = t.find("power_w"); w != t.end() && w->is_number()) trial.power_w = w->get<double>();
  if (auto c = t.find("sm_clock_counted_mhz"); c != t.end() && c->is_number_integer())
    trial.sm_clock_counted_mhz = c->get<int>();
  // An "ok" trial without a positive time cannot be placed on a time axis.
  if (trial.outcome == Outcome::ok && !(trial.median_us > 0))
    return fail(ErrorCode::invalid_argument, "an ok trial without a positive median_us");
  return trial;
}

}  // namespace

Result<std::vector<TrialSet>> parse_trials(std::string_view text, std::string_view origin) {
  const std::string where(origin);
  json doc = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded() || !doc.is_object())
    return fail(ErrorCode::invalid_argument, where + ": not a JSON object");
  auto problems = doc.find("problems");
  if (problems == doc.end() || !problems->is_array())
    return fail(ErrorCode::invalid_argument,
                where + ": no \"problems\" array (is this a ktune-bench --record file?)");
  std::vector<TrialSet> sets;
  for (size_t i = 0; i < problems->size(); ++i) {
    const json& p = (*problems)[i];
    const std::string at = where + ": problems[" + std::to_string(i) + "]";
    if (!p.is_object() || !p.contains("problem") || !p["problem"].is_string() ||
        !p.contains("trials") || !p["trials"].is_array())
      return fail(ErrorCode::invalid_argument, at + ": needs \"problem\" and \"trials\"");
    auto problem = parse_problem_key(p["problem"].get<std::string>());
    if (!problem) return fail(ErrorCode::invalid_argument, at + ": " + problem.error().message);
    TrialSet set{.source = std::string(origin),
                 .strategy = doc.value("strategy", ""),
                 .device_class = doc.value("device_class", ""),
                 .date = doc.value("date", ""),
                 .problem = *problem,
                 .trials = {}};
    const json& trials = p["trials"];
    for (size_t k = 0; k < trials.size(); ++k) {
      if (!trials[k].is_object())
        return fail(ErrorCode::invalid_argument,
                    at + ".trials[" + std::to_string(k) + "]: not an object");
      auto trial = parse_trial(trials[k]);
      if (!trial)
        return fail(ErrorCode::invalid_argument,
                    at + ".trials[" + std::to_string(k) + "]: " + trial.error().message);
      set.trials.push_back(std::move(*trial));
    }
    sets.push_back(std::move(set));
  }
  return sets;
}

bool is_replay_file(std::string_view text) {
  json doc = json::parse(text, nullptr, /*allow_exceptions=*/false);
  return doc.is_object() && doc.value("benchmark", "") == "replay";
}

Result<std::vector<ReplayCurves>> parse_replay(std::string_view text, std::string_view origin) {
  const std::string where(origin);
  json doc = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded() || !doc.is_object() || doc.value("benchmark", "") != "replay")
    return fail(ErrorCode::invalid_argument, where + ": not a replay file");
  auto problems = doc.find("problems");
  if (problems == doc.end() || !problems->is_array())
    return fail(ErrorCode::invalid_argument, where + ": no \"problems\" array");
  std::vector<ReplayCurves> out;
  for (size_t i = 0; i < problems->size(); ++i) {
    const json& p = (*problems)[i];
    const std::string at = where + ": problems[" + std::to_string(i) + "]";
    if (!p.is_object() || !p.contains("problem") || !p["problem"].is_string() ||
        !p.contains("strategies") || !p["strategies"].is_object())
      return fail(ErrorCode::invalid_argument, at + ": needs \"problem\" and \"strategies\"");
    auto problem = parse_problem_key(p["problem"].get<std::string>());
    if (!problem) return fail(ErrorCode::invalid_argument, at + ": " + problem.error().message);
    ReplayCurves r{.source = where,
                   .data = doc.value("data", ""),
                   .seeds = doc.value("seeds", 0),
                   .problem = *problem,
                   .configs = p.value("configs", size_t(0)),
                   .best_us = p.value("best_us", 0.0),
                   .curves = {}};
    for (const auto& [name, s] : p["strategies"].items()) {
      ReplayCurves::Curve c{.strategy = name, .points = {}, .trials_to_98pct = 0};
      if (s.is_object()) {
        c.trials_to_98pct = s.value("median_trials_to_98pct", 0.0);
        for (const auto& pt : s.value("median_fraction", json::array()))
          if (pt.is_array() && pt.size() == 2 && pt[0].is_number() && pt[1].is_number())
            c.points.push_back({pt[0].get<double>(), pt[1].get<double>()});
      }
      if (c.points.empty())
        return fail(ErrorCode::invalid_argument, at + ": strategy " + name + " has no curve");
      r.curves.push_back(std::move(c));
    }
    out.push_back(std::move(r));
  }
  return out;
}

std::vector<TrialSet> trial_sets_from_records(std::vector<TrialRecord> records) {
  std::erase_if(records, [](const TrialRecord& r) {
    return r.outcome == Outcome::in_flight || !r.plausible();
  });
  std::stable_sort(records.begin(), records.end(),
                   [](const auto& a, const auto& b) { return a.timestamp < b.timestamp; });
  std::map<std::pair<std::string, std::string>, TrialSet> by_key;
  for (auto& r : records) {
    auto [it, fresh] = by_key.try_emplace({r.device.id(), r.problem.key()});
    TrialSet& set = it->second;
    if (fresh) {
      set.source = "store";
      set.device_class = r.device.id();
      set.problem = r.problem;
    }
    set.trials.push_back(Trial{.template_name = r.template_name,
                               .params = std::move(r.params),
                               .outcome = r.outcome,
                               .median_us = r.median_us,
                               .sm_clock_mhz = r.sm_clock_mhz,
                               .power_w = r.power_w,
                               .sm_clock_counted_mhz = r.sm_clock_counted_mhz});
  }
  std::vector<TrialSet> sets;
  for (auto& [_, set] : by_key) sets.push_back(std::move(set));
  return sets;
}

namespace {

bool device_matches(std::string_view id, std::string_view wanted) {
  if (wanted.empty()) return true;
  return id == wanted || id.find(wanted) != std::string_view::npos;
}

}  // namespace

void apply_filter(ReportInput& input, const Filter& filter) {
  std::erase_if(input.trial_sets, [&](const TrialSet& s) {
    return !device_matches(s.device_class, filter.device) ||
           (!filter.op.empty() && s.problem.op != filter.op);
  });
  std::erase_if(input.replays, [&](const ReplayCurves& r) {
    return !filter.op.empty() && r.problem.op != filter.op;
  });
  std::erase_if(input.winners, [&](const WinnerRecord& w) {
    return !device_matches(w.device.id(), filter.device) ||
           (!filter.op.empty() && w.problem.op != filter.op);
  });
}

}  // namespace ktune::report
