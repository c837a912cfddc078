#include "tuner/tuning_job.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <deque>
#include <future>
#include <map>

#include "config/log.h"
#include "tuner/strategy/registry.h"

namespace ktune {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

std::int64_t unix_now() {
  return std::int64_t(std::time(nullptr));
}

// What the worker needs to verify and time one compiled candidate.
TrialRequest trial_request(std::uint64_t id, const Candidate& c, const Instance& inst,
                           const CompileResult& compiled, const Problem& problem,
                           const TimingOptions& timing) {
  TrialRequest tr;
  tr.id = id;
  tr.params = c.params;
  tr.lowered_name = compiled.kernel.lowered_name;
  tr.launch = inst.launch;
  tr.args = inst.args;
  const auto& tolerance = c.tmpl->manifest.tolerance;
  auto tol = tolerance.find(problem.out_dtype);
  tr.tolerance = tol == tolerance.end() ? 1e-2 : tol->second;
  tr.timing = timing;
  return tr;
}

std::string describe(const Candidate& c) {
  return c.template_name + " {" + params_to_string(c.params) + "}";
}

}  // namespace

WorkerJson cublas_problem(const Problem& p) {
  return {{"M", p.dim("M")},  {"N", p.dim("N")},          {"K", p.dim("K")}, {"layout", p.layout},
          {"dtype", p.dtype}, {"out_dtype", p.out_dtype}, {"alpha", 1.0},    {"beta", 0.0}};
}

Result<std::vector<ArgValue>> setup_args(const std::vector<const KernelTemplate*>& templates,
                                         const Problem& problem, const DeviceLimits& limits) {
  std::vector<ArgValue> out;
  for (const KernelTemplate* t : templates) {
    auto h = heuristic_config(*t, problem, limits);
    if (!h) continue;
    auto inst = instantiate(*t, problem, limits, *h);
    if (!inst) continue;
    for (const auto& a : inst->args) {
      if (!a.is_buffer) continue;
      auto it =
          std::find_if(out.begin(), out.end(), [&](const ArgValue& o) { return o.name == a.name; });
      if (it == out.end())
        out.push_back(a);
      else
        it->count = std::max(it->count, a.count);
    }
  }
  if (out.empty())
    return fail(ErrorCode::invalid_argument, "no template can set up " + problem.describe());
  return out;
}

Result<void> prepare_runner(TrialRunner& runner, Compiler& compiler, const KernelTemplate& t,
                            const std::vector<ArgValue>& args, const Problem& problem,
                            const DeviceLimits& limits, unsigned seed) {
  if (auto ok = runner.setup(args, seed); !ok) return std::unexpected(ok.error());
  const Manifest& m = t.manifest;
  if (!m.reference.builtin.empty()) {
    auto r = runner.reference({{"kind", m.reference.builtin},
                               {"problem", cublas_problem(problem)},
                               {"args", [&] {
                                  WorkerJson a = WorkerJson::array();
                                  for (const auto& x : args) a.push_back(to_json(x));
                                  return a;
                                }()}});
    if (!r) return std::unexpected(r.error());
    return {};
  }
  auto ref = reference_instance(t, problem, limits);
  if (!ref) return std::unexpected(ref.error());
  auto compiled = compiler.compile({&t, ref->name_expression, target_arch(m, limits.cc)});
  if (!compiled.ok())
    return fail(ErrorCode::internal,
                "reference kernel of " + t.name() + " does not compile:\n" + compiled.log);
  WorkerJson a = WorkerJson::array();
  for (const auto& x : ref->args) a.push_back(to_json(x));
  auto r = runner.reference({{"kind", "kernel"},
                             {"lowered_name", compiled.kernel.lowered_name},
                             {"launch", to_json(ref->launch)},
                             {"args", a}},
                            compiled.kernel.cubin);
  if (!r) return std::unexpected(r.error());
  return {};
}

TuningJob::TuningJob(const TemplateRegistry& templates, Compiler& compiler, Store* store,
                     TrialRunner& runner, TuneContext context)
    : m_templates(templates),
      m_compiler(compiler),
      m_store(store),
      m_runner(runner),
      m_ctx(std::move(context)) {}

Result<TuneResult> TuningJob::run(const TuneRequest& req, const ProgressFn& progress) {
  const auto t0 = Clock::now();
  TuneResult result;
  TuneStats& stats = result.stats;
  const Problem& problem = req.problem;
  const DeviceLimits& limits = m_ctx.limits;

  // --- the candidates: every template for the op, pruned, minus the blocklist ---
  std::vector<const KernelTemplate*> templates;
  for (const KernelTemplate* t : m_templates.for_problem(problem, limits.cc))
    if (req.templates.empty() || std::count(req.templates.begin(), req.templates.end(), t->name()))
      templates.push_back(t);
  if (templates.empty())
    return fail(ErrorCode::invalid_argument, "no template implements " + problem.describe() +
                                                 " on sm_" + std::to_string(limits.cc));
  CandidateSet candidates;
  std::vector<size_t> seeds;
  std::string space_errors;
  for (const KernelTemplate* t : templates) {
    auto space = SearchSpace::build(*t, problem, limits);
    if (!space) {
      space_errors += "\n  " + space.error().message;
      continue;
    }
    stats.space_total += space->report().total;
    const std::string arch = target_arch(t->manifest, limits.cc);
    for (const auto& p : space->configs()) {
      if (m_store) {
        auto blocked =
            is_blocked(*m_store, BlockEntry{t->hash, arch, m_ctx.driver, p, Outcome::crash, "", 0});
        if (blocked && *blocked) continue;
      }
      candidates.add(t, t->name(), p, t->manifest.params);
    }
    if (auto h = heuristic_config(*t, problem, limits))
      seeds.push_back(candidates.find(t->name(), *h));
  }
  for (const auto& p : req.seeds)
    for (const KernelTemplate* t : templates)
      if (size_t i = candidates.find(t->name(), p); i != CandidateSet::npos) seeds.push_back(i);
  if (candidates.size() == 0)
    return fail(ErrorCode::invalid_argument,
                "no config to try for " + problem.describe() + space_errors);
  stats.candidates = candidates.size();
  auto strategy = make_strategy(req.strategy, candidates, seeds, req.rng_seed);
  if (!strategy) return std::unexpected(strategy.error());

  // --- the worker: arguments and reference ---
  auto args = setup_args(templates, problem, limits);
  if (!args) return std::unexpected(args.error());
  if (auto ok = prepare_runner(m_runner, m_compiler, *templates.front(), *args, problem, limits,
                               unsigned(req.rng_seed));
      !ok)
    return std::unexpected(ok.error());

  // --- the search: compile ahead on the pool while the worker measures ---
  const int max_trials = req.budget.max_trials > 0
                             ? std::min<int>(req.budget.max_trials, int(candidates.size()))
                             : int(candidates.size());
  const size_t window = std::max<size_t>(2, m_compiler.threads());
  struct Pending {
    size_t index;
    Instance instance;
    std::future<CompileResult> compiled;
  };
  std::deque<Pending> pending;
  int proposed = 0;
  bool strategy_done = false;
  auto refill = [&] {
    while (!strategy_done && pending.size() < window && proposed < max_trials) {
      const size_t want = std::min<size_t>(window - pending.size(), size_t(max_trials - proposed));
      auto batch = (*strategy)->propose(want);
      if (batch.empty()) strategy_done = true;
      for (size_t i : batch) {
        const Candidate& c = candidates[i];
        auto inst = instantiate(*c.tmpl, problem, limits, c.params);
        if (!inst) continue;  // cannot happen for a pruned config
        auto fut = m_compiler.submit(
            {c.tmpl, inst->name_expression, target_arch(c.tmpl->manifest, limits.cc)});
        pending.push_back({i, std::move(*inst), std::move(fut)});
        ++proposed;
      }
    }
  };

  WriteBatch trial_batch;
  auto flush_trials = [&] {
    if (m_store && !trial_batch.empty()) (void)m_store->write(trial_batch, Durability::buffered);
    trial_batch = WriteBatch();
  };
  std::map<size_t, TrialResult> ok_results;
  double best_us = std::numeric_limits<double>::infinity();
  size_t best_index = CandidateSet::npos;
  int ok_count = 0;

  refill();
  while (!pending.empty()) {
    if (req.budget.exhausted(stats.trials, seconds_since(t0), best_us)) break;
    Pending p = std::move(pending.front());
    pending.pop_front();
    const Candidate& c = candidates[p.index];
    CompileResult compiled = p.compiled.get();
    refill();  // keep the pool busy while this one is measured

    TrialRecord trial;
    trial.device = m_ctx.device;
    trial.problem = problem;
    trial.template_name = c.template_name;
    trial.template_hash = c.tmpl->hash;
    trial.params = c.params;
    trial.timestamp = unix_now();
    trial.job_id = req.job_id;
    trial.compile_ms = compiled.kernel.compile_ms;
    trial.registers = compiled.kernel.registers;
    trial.spill_bytes = compiled.kernel.spill_stores + compiled.kernel.spill_loads;
    trial.smem_bytes = int(p.instance.launch.smem) + compiled.kernel.smem_bytes;
    stats.cache_hits += compiled.cache_hit;
    if (!compiled.cache_hit) stats.compile_s += compiled.kernel.compile_ms / 1000;

    Observation obs{p.index, std::numeric_limits<double>::infinity()};
    if (!compiled.ok()) {
      trial.outcome = Outcome::compile_error;
      trial.message = compiled.log.substr(0, 2000);
    } else {
      const TrialRequest tr = trial_request(p.index, c, p.instance, compiled, problem, req.timing);
      // In flight before launch: if the parent dies mid-trial, the record names the config.
      if (m_store) {
        trial.outcome = Outcome::in_flight;
        (void)m_store->put(Table::trials, trial.key(), encode(trial), Durability::buffered);
      }
      const auto m0 = Clock::now();
      TrialResult r = m_runner.run(tr, compiled.kernel.cubin);
      stats.measure_s += seconds_since(m0);
      trial.outcome = r.outcome;
      trial.median_us = r.timing.median_us;
      trial.spread_pct = r.timing.spread_pct();
      trial.ref_error = r.ref_error;
      trial.message = r.message;
      if (r.outcome == Outcome::ok) {
        obs.value = r.timing.median_us;
        ++ok_count;
        if (r.timing.median_us < best_us) {
          best_us = r.timing.median_us;
          best_index = p.index;
        }
        ok_results[p.index] = r;
      } else if ((r.outcome == Outcome::crash || r.outcome == Outcome::timeout) && m_store) {
        (void)put_block(*m_store,
                        BlockEntry{c.tmpl->hash, target_arch(c.tmpl->manifest, limits.cc),
                                   m_ctx.driver, c.params, r.outcome, r.message, unix_now()});
      }
    }
    switch (trial.outcome) {
      case Outcome::compile_error:
        ++stats.compile_errors;
        break;
      case Outcome::resource_error:
        ++stats.resource_errors;
        break;
      case Outcome::wrong_result:
        ++stats.wrong_results;
        break;
      case Outcome::crash:
        ++stats.crashes;
        break;
      case Outcome::timeout:
        ++stats.timeouts;
        break;
      default:
        break;
    }
    if (trial.outcome != Outcome::ok)
      log(LogLevel::debug, "trial_failed",
          {{"config", describe(c)},
           {"outcome", std::string(to_string(trial.outcome))},
           {"message", trial.message.substr(0, 300)}});
    ++stats.trials;
    (*strategy)->observe({obs});
    add_trial(trial_batch, trial);
    if (trial_batch.size() >= 16) flush_trials();
    result.trials.push_back(std::move(trial));
    if (progress) {
      TuneProgress pr;
      pr.trials = stats.trials;
      pr.budget_trials = max_trials;
      pr.ok = ok_count;
      pr.failed = stats.trials - ok_count;
      pr.best_us = std::isfinite(best_us) ? best_us : 0;
      pr.best = best_index == CandidateSet::npos ? "" : describe(candidates[best_index]);
      pr.elapsed_s = seconds_since(t0);
      pr.eta_s = stats.trials > 0 ? pr.elapsed_s / stats.trials * (max_trials - stats.trials) : 0;
      if (req.budget.max_seconds > 0)
        pr.eta_s = std::min(pr.eta_s, std::max(0.0, req.budget.max_seconds - pr.elapsed_s));
      progress(pr);
    }
    refill();
  }
  // Let compiles still in flight finish (their futures reference the pool) before leaving.
  for (auto& p : pending) p.compiled.wait();
  flush_trials();
  stats.respawns = m_runner.respawns();

  if (ok_results.empty()) {
    stats.wall_s = seconds_since(t0);
    return fail(ErrorCode::not_found,
                "no config of " + problem.describe() + " passed verification in " +
                    std::to_string(stats.trials) + " trials (" +
                    std::to_string(stats.compile_errors) + " compile errors, " +
                    std::to_string(stats.wrong_results) + " wrong results, " +
                    std::to_string(stats.resource_errors) + " resource errors, " +
                    std::to_string(stats.crashes) + " crashes, " + std::to_string(stats.timeouts) +
                    " timeouts)");
  }

  // --- finalists: re-timed interleaved; a winner only beyond the measured spread ---
  std::vector<std::pair<double, size_t>> by_time;
  for (const auto& [i, r] : ok_results) by_time.emplace_back(r.timing.median_us, i);
  std::sort(by_time.begin(), by_time.end());
  by_time.resize(std::min<size_t>(by_time.size(), size_t(std::max(1, req.finalists))));
  std::vector<std::uint64_t> ids;
  for (const auto& [_, i] : by_time) ids.push_back(i);
  std::map<size_t, Timing> final_timing;
  for (const auto& [_, i] : by_time) final_timing[i] = ok_results[i].timing;
  if (ids.size() > 1) {
    auto retimed = m_runner.retime(ids, req.retime_rounds, req.timing);
    if (!retimed) {
      // The worker was replaced since the finalists ran (a later config crashed it): load them
      // into the new one (their cubins are cache hits) and re-time.
      for (std::uint64_t id : ids) {
        const Candidate& c = candidates[size_t(id)];
        auto inst = instantiate(*c.tmpl, problem, limits, c.params);
        auto compiled = m_compiler.compile(
            {c.tmpl, inst->name_expression, target_arch(c.tmpl->manifest, limits.cc)});
        (void)m_runner.run(trial_request(id, c, *inst, compiled, problem, req.timing),
                           compiled.kernel.cubin);
      }
      retimed = m_runner.retime(ids, req.retime_rounds, req.timing);
    }
    if (retimed)
      for (const auto& [id, t] : *retimed)
        if (final_timing.count(size_t(id)) && t.median_us > 0) final_timing[size_t(id)] = t;
  }
  std::vector<size_t> order(ids.begin(), ids.end());
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return final_timing[a].median_us < final_timing[b].median_us;
  });
  // The ranking is by the interleaved re-timing; each entry keeps its spread so a reader can see
  // which ones are within noise of each other.
  const size_t chosen = order.front();
  result.winner_trial_id = chosen;

  WinnerRecord& w = result.winner;
  w.device = m_ctx.device;
  w.problem = problem;
  w.validators = Validators{m_ctx.driver, m_ctx.nvrtc, k_store_format_version};
  for (size_t i : order) {
    const Candidate& c = candidates[i];
    auto inst = instantiate(*c.tmpl, problem, limits, c.params);
    RankedConfig rc;
    rc.template_name = c.template_name;
    rc.template_hash = c.tmpl->hash;
    rc.params = c.params;
    rc.median_us = final_timing[i].median_us;
    rc.spread_pct = final_timing[i].spread_pct();
    if (inst && inst->metric_kind == MetricSpec::Kind::flops)
      rc.tflops = inst->metric / (rc.median_us * 1e6);
    if (inst && inst->metric_kind == MetricSpec::Kind::bytes)
      rc.gbps = inst->metric / (rc.median_us * 1e3);
    w.ranked.push_back(rc);
  }
  w.ref_error = ok_results[chosen].ref_error;
  const GpuTelemetry tel = m_runner.last_telemetry();
  w.sm_clock_mhz = tel.sm_clock_mhz;
  w.mem_clock_mhz = tel.mem_clock_mhz;
  w.power_w = tel.power_w;
  w.node_id = m_ctx.node_id;
  w.timestamp = unix_now();
  w.trials = stats.trials;
  w.strategy = std::string((*strategy)->name());
  if (m_store)
    if (auto ok = put_winner(*m_store, w); !ok) return std::unexpected(ok.error());
  stats.wall_s = seconds_since(t0);
  return result;
}

}  // namespace ktune
