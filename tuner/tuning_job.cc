#include "tuner/tuning_job.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <deque>
#include <expected>
#include <future>
#include <map>
#include <optional>

#include "config/log.h"
#include "tuner/seeds.h"
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

// The timing a reused trial record stands for: its median, and p10/p90 that give its spread.
Timing timing_of(const TrialRecord& r) {
  Timing t;
  t.median_us = r.median_us;
  const double half = r.median_us * r.spread_pct / 200;
  t.p10_us = r.median_us - half;
  t.p90_us = r.median_us + half;
  return t;
}

// The telemetry a trial or winner record keeps (both name the fields alike), written and read
// in one place so that a field added to the records is copied on every path.
template <typename Record>
void keep_telemetry(Record& r, const GpuTelemetry& t) {
  r.sm_clock_mhz = t.sm_clock_mhz;
  r.mem_clock_mhz = t.mem_clock_mhz;
  r.power_w = t.power_w;
  r.sm_clock_counted_mhz = t.sm_clock_counted_mhz;
}

GpuTelemetry telemetry_of(const TrialRecord& r) {
  GpuTelemetry t;
  t.sm_clock_mhz = r.sm_clock_mhz;
  t.mem_clock_mhz = r.mem_clock_mhz;
  t.power_w = r.power_w;
  t.sm_clock_counted_mhz = r.sm_clock_counted_mhz;
  return t;
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
      if (!a.is_buffer()) continue;
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

namespace {

// A measurement that foreign work disturbed is taken again at most this often, then kept.
constexpr int k_max_retakes = 3;

// Why a job stopped before its budget was spent (TuneControl).
enum class Stop { none, cancelled, gpu_refused };

// One TuningJob::run(): its phases, in order, and the state they share.
//   candidates -> worker -> earlier trials (resume) -> search -> finalists -> commit
class JobRun {
 public:
  JobRun(const TemplateRegistry& templates, Compiler& compiler, Store* store, TrialRunner& runner,
         const TuneContext& context, const TuneRequest& request,
         const TuningJob::ProgressFn& progress)
      : m_templates(templates),
        m_compiler(compiler),
        m_store(store),
        m_runner(runner),
        m_ctx(context),
        m_req(request),
        m_progress(progress),
        m_respawns_before(runner.respawns()) {}

  Result<TuneResult> run() {
    if (auto ok = build_candidates(); !ok) return std::unexpected(ok.error());
    if (auto ok = prepare_worker(); !ok) return std::unexpected(ok.error());
    if (auto ok = reuse_earlier_trials(); !ok) return std::unexpected(ok.error());
    search();
    if (m_stop != Stop::none && (!m_req.control.finish_on_cancel || m_ok_results.empty()))
      return finish(stopped_error());
    if (m_ok_results.empty()) return finish(nothing_passed_error());
    if (auto ok = finalists(); !ok) return finish(std::unexpected(ok.error()));
    return finish(commit());
  }

 private:
  struct Pending {
    size_t index;
    Instance instance;
    std::future<CompileResult> compiled;
  };

  // --- candidates: every template for the op, pruned, minus the blocklist; the strategy ---
  Result<void> build_candidates() {
    const Problem& problem = m_req.problem;
    const DeviceLimits& limits = m_ctx.limits;
    for (const KernelTemplate* t : m_templates.for_problem(problem, limits.cc))
      if (m_req.templates.empty() ||
          std::count(m_req.templates.begin(), m_req.templates.end(), t->name()))
        m_job_templates.push_back(t);
    if (m_job_templates.empty())
      return fail(ErrorCode::invalid_argument, "no template implements " + problem.describe() +
                                                   " on sm_" + std::to_string(limits.cc));
    TemplateSeeds seeds;
    std::string space_errors;
    for (const KernelTemplate* t : m_job_templates) {
      auto space = SearchSpace::build(*t, problem, limits);
      if (!space) {
        space_errors += "\n  " + space.error().message;
        continue;
      }
      m_stats.space_total += space->report().total;
      const std::string arch = target_arch(t->manifest, limits.cc);
      // A crash recorded under any hash of this kernel (registry.h) keeps the config out.
      const std::vector<std::string> hashes = t->known_hashes();
      auto blocked = [&](const Params& p) {
        return std::ranges::any_of(hashes, [&](const std::string& hash) {
          auto b =
              is_blocked(*m_store, BlockEntry{hash, arch, m_ctx.driver, p, Outcome::crash, "", 0});
          return b && *b;
        });
      };
      for (const auto& p : space->configs()) {
        if (m_store && blocked(p)) continue;
        m_candidates.add(t, t->name(), p, t->manifest.params);
      }
      add_template_seeds(seeds, m_candidates, *t, problem, limits);
    }
    if (m_candidates.size() == 0)
      return fail(ErrorCode::invalid_argument,
                  "no config to try for " + problem.describe() + space_errors);
    m_stats.candidates = m_candidates.size();
    m_max_trials =
        int(trial_budget(size_t(std::max(m_req.budget.max_trials, 0)), m_candidates.size()));
    // Seeds in tuner/seeds.h's order. The rules' configs among them: without them call D's
    // 120-trial job at 384x28672 never left the fitting rule's 192x160 tiles; with them call F's
    // found a ping-pong config 9 % faster graphed, 6 % in its own time (bench/NOTES.md).
    SeedOrder order = order_seeds(seeds, m_candidates, m_req.seeds, size_t(m_max_trials));
    m_stats.rule_seeds_queued = int(order.rule_configs);
    auto strategy =
        make_strategy(m_req.strategy, m_candidates, std::move(order.seeds), m_req.rng_seed);
    if (!strategy) return std::unexpected(strategy.error());
    m_strategy = std::move(*strategy);
    return {};
  }

  // --- the worker: arguments and reference ---
  Result<void> prepare_worker() {
    auto args = setup_args(m_job_templates, m_req.problem, m_ctx.limits);
    if (!args) return std::unexpected(args.error());
    if (!acquire_gpu()) return stopped_error();
    return prepare_runner(m_runner, m_compiler, *m_job_templates.front(), *args, m_req.problem,
                          m_ctx.limits, unsigned(m_req.rng_seed));
  }

  // --- resume: what an earlier job for this device class and problem measured ---
  Result<void> reuse_earlier_trials() {
    if (!m_req.resume || !m_store) return {};
    auto records = scan_trials(*m_store, m_ctx.device.id() + "/" + m_req.problem.key() + "/");
    if (!records) return std::unexpected(records.error());
    std::vector<Observation> told;
    for (const TrialRecord& r : *records) {
      if (r.outcome == Outcome::in_flight) continue;  // it died mid-trial: measured again
      if (!r.plausible()) continue;  // an ok with no believable time: measured again
      // A time taken another way (tuning.timing_l2 changed, or a record from before trials
      // said) does not rank against this job's: measured again. Failures stand either way.
      if (r.outcome == Outcome::ok && r.timing_l2 != m_req.timing.l2) continue;
      const size_t i = m_candidates.find(r.template_name, r.params);
      if (i == CandidateSet::npos || !m_candidates[i].tmpl->same_kernel(r.template_hash)) continue;
      Observation o{i, std::numeric_limits<double>::infinity()};
      if (r.outcome == Outcome::ok) {
        TrialResult ok;
        ok.id = i;
        ok.timing = timing_of(r);
        ok.ref_error = r.ref_error;
        // What the GPU ran at when it was timed, for the winner record if this config wins.
        ok.telemetry = telemetry_of(r);
        note_success(i, ok);
        o.value = r.median_us;
      }
      count(r.outcome);
      ++m_stats.reused;
      told.push_back(o);
    }
    if (told.empty()) return {};
    m_strategy->observe(told);
    m_proposed = m_stats.reused;
    log(LogLevel::info, "trials_reused",
        {{"problem", m_req.problem.key()}, {"reused", m_stats.reused}});
    report_progress();
    return {};
  }

  // --- the search: compile ahead on the pool while the worker measures ---
  void search() {
    refill();
    while (!m_pending.empty()) {
      if (m_req.budget.exhausted(m_stats.trials, seconds_since(m_t0), m_best_us)) break;
      if (cancel_requested()) break;
      Pending p = std::move(m_pending.front());
      m_pending.pop_front();
      if (!run_trial(p)) break;
      refill();
    }
    // Let compiles still in flight finish (their futures reference the pool) before leaving.
    for (auto& p : m_pending) p.compiled.wait();
    m_pending.clear();
  }

  // Keeps up to one compile per pool thread (at least two) ahead of the worker.
  void refill() {
    const size_t window = std::max<size_t>(2, m_compiler.threads());
    while (!m_strategy_done && m_pending.size() < window && m_proposed < m_max_trials) {
      const size_t want =
          std::min<size_t>(window - m_pending.size(), size_t(m_max_trials - m_proposed));
      auto batch = m_strategy->propose(want);
      if (batch.empty()) m_strategy_done = true;
      for (size_t i : batch) {
        const Candidate& c = m_candidates[i];
        auto inst = instantiate(*c.tmpl, m_req.problem, m_ctx.limits, c.params);
        if (!inst) continue;  // cannot happen for a pruned config
        auto fut = m_compiler.submit(
            {c.tmpl, inst->name_expression, target_arch(c.tmpl->manifest, m_ctx.limits.cc)});
        m_pending.push_back({i, std::move(*inst), std::move(fut)});
        ++m_proposed;
      }
    }
  }

  // Verifies and times one compiled candidate (or records its compile error), records it and
  // tells the strategy. False when the job must stop (the trial is then not recorded).
  bool run_trial(Pending& p) {
    const Candidate& c = m_candidates[p.index];
    CompileResult compiled = p.compiled.get();
    refill();  // keep the pool busy while this one is measured

    TrialRecord trial;
    trial.device = m_ctx.device;
    trial.problem = m_req.problem;
    trial.template_name = c.template_name;
    trial.template_hash = c.tmpl->hash;
    trial.params = c.params;
    trial.timestamp = unix_now();
    trial.job_id = m_req.job_id;
    trial.compile_ms = compiled.kernel.compile_ms;
    trial.registers = compiled.kernel.registers;
    trial.spill_bytes = compiled.kernel.spill_stores + compiled.kernel.spill_loads;
    trial.smem_bytes = int(p.instance.launch.smem) + compiled.kernel.smem_bytes;
    m_stats.cache_hits += compiled.cache_hit;
    if (!compiled.cache_hit) m_stats.compile_s += compiled.kernel.compile_ms / 1000;

    Observation obs{p.index, std::numeric_limits<double>::infinity()};
    if (!compiled.ok()) {
      trial.outcome = Outcome::compile_error;
      trial.message = compiled.log.substr(0, 2000);
    } else {
      if (!acquire_gpu()) return false;
      auto request = request_for(p.index, p.instance, compiled);
      // In flight before launch: if the parent dies mid-trial, the record names the config.
      if (m_store && request) {
        trial.outcome = Outcome::in_flight;
        (void)m_store->put(Table::trials, trial.key(), encode(trial), Durability::buffered);
      }
      std::optional<TrialResult> r =
          request ? measure(*request, compiled.kernel.cubin) : std::optional(request.error());
      if (!r) {
        if (m_store) (void)m_store->remove(Table::trials, trial.key(), Durability::buffered);
        return false;
      }
      trial.outcome = r->outcome;
      trial.median_us = r->timing.median_us;
      trial.spread_pct = r->timing.spread_pct();
      trial.ref_error = r->ref_error;
      trial.message = r->message;
      if (r->outcome == Outcome::ok) {
        keep_telemetry(trial, r->telemetry);
        trial.timing_l2 = m_req.timing.l2;
        obs.value = r->timing.median_us;
        note_success(p.index, *r);
        m_worker_of[p.index] = m_runner.respawns();
      } else if ((r->outcome == Outcome::crash || r->outcome == Outcome::timeout) && m_store) {
        (void)put_block(*m_store,
                        BlockEntry{c.tmpl->hash, target_arch(c.tmpl->manifest, m_ctx.limits.cc),
                                   m_ctx.driver, c.params, r->outcome, r->message, unix_now()});
      }
    }
    count(trial.outcome);
    if (trial.outcome != Outcome::ok)
      log(LogLevel::debug, "trial_failed",
          {{"config", describe(c)},
           {"outcome", std::string(to_string(trial.outcome))},
           {"message", trial.message.substr(0, 300)}});
    m_strategy->observe({obs});
    // Written as soon as it is known: a kill of the process loses at most the trial in flight.
    if (m_store)
      (void)m_store->put(Table::trials, trial.key(), encode(trial), Durability::buffered);
    const Outcome outcome = trial.outcome;
    m_result.trials.push_back(std::move(trial));
    report_progress(outcome);
    return true;
  }

  // Runs one trial on the worker, again when foreign work disturbed the measurement (after
  // acquire_gpu; at most k_max_retakes times, then the last one is kept). nullopt: stop.
  // REQUIRES: acquire_gpu() returned true for the first take.
  std::optional<TrialResult> measure(const TrialRequest& request, const std::string& cubin) {
    for (int take = 0;; ++take) {
      const std::uint64_t before = disturbance();
      const auto m0 = Clock::now();
      TrialResult r = m_runner.run(request, cubin);
      m_stats.measure_s += seconds_since(m0);
      if (before == disturbance() || take == k_max_retakes || r.outcome == Outcome::crash) return r;
      ++m_stats.retaken;
      log(LogLevel::info, "trial_retaken",
          {{"config", describe(m_candidates[size_t(request.id)])}, {"take", take + 1}});
      if (!acquire_gpu()) return std::nullopt;
    }
  }

  // --- finalists: re-timed interleaved; a winner only beyond the measured spread ---
  Result<void> finalists() {
    std::vector<std::pair<double, size_t>> by_time;
    for (const auto& [i, r] : m_ok_results) by_time.emplace_back(r.timing.median_us, i);
    std::sort(by_time.begin(), by_time.end());
    by_time.resize(std::min<size_t>(by_time.size(), size_t(std::max(1, m_req.finalists))));
    std::vector<std::uint64_t> ids;
    for (const auto& [_, i] : by_time) {
      ids.push_back(i);
      m_final_timing[i] = m_ok_results[i].timing;
    }
    // After a stop, finish_on_cancel goes on with what was measured; the re-timing needs the
    // GPU, and is skipped when it was refused.
    const bool go_on = m_req.control.finish_on_cancel;
    if (cancel_requested() && !go_on) return stopped_error();
    if (acquire_gpu()) {
      // Finalists the worker does not hold (reused from an earlier job, or measured by a worker
      // since replaced) are loaded again first.
      load_finalists(ids, false);
      if (ids.size() > 1) {
        auto retimed = retime(ids);
        if (!retimed && m_stop != Stop::gpu_refused) {
          // Still not all there (the worker evicted one, or was replaced while loading): load
          // every finalist into the current worker and try once more.
          load_finalists(ids, true);
          retimed = retime(ids);
        }
        if (retimed)
          for (const auto& [id, t] : *retimed)
            if (m_final_timing.count(size_t(id)) && t.median_us > 0) m_final_timing[size_t(id)] = t;
      }
    }
    if (m_stop == Stop::gpu_refused && !go_on) return stopped_error();
    m_ranking.assign(ids.begin(), ids.end());
    std::sort(m_ranking.begin(), m_ranking.end(), [&](size_t a, size_t b) {
      return m_final_timing[a].median_us < m_final_timing[b].median_us;
    });
    if (m_ranking.empty())
      return fail(ErrorCode::not_found,
                  "no finalist of " + m_req.problem.describe() + " ran again for re-timing");
    return {};
  }

  // Runs finalists on the current worker (their cubins are cache hits) so it holds them for
  // retime: those it does not hold, or every one when `all`. Part of the finalists' timing: no
  // trial record is written. A finalist that fails now is dropped from `ids`.
  void load_finalists(std::vector<std::uint64_t>& ids, bool all) {
    std::vector<std::uint64_t> kept;
    for (std::uint64_t id : ids) {
      auto held = m_worker_of.find(size_t(id));
      if (all || held == m_worker_of.end() || held->second != m_runner.respawns()) {
        const TrialResult r = reload(size_t(id));
        if (r.outcome != Outcome::ok) {
          log(LogLevel::warn, "finalist_dropped",
              {{"config", describe(m_candidates[size_t(id)])},
               {"outcome", std::string(to_string(r.outcome))},
               {"message", r.message.substr(0, 300)}});
          m_final_timing.erase(size_t(id));
          continue;
        }
        m_worker_of[size_t(id)] = m_runner.respawns();
      }
      kept.push_back(id);
    }
    ids = std::move(kept);
  }

  TrialResult reload(size_t index) {
    const Candidate& c = m_candidates[index];
    auto inst = instantiate(*c.tmpl, m_req.problem, m_ctx.limits, c.params);
    if (!inst) {  // cannot happen: it was instantiated for its trial
      TrialResult r;
      r.outcome = Outcome::invalid;
      r.message = inst.error().message;
      return r;
    }
    auto compiled = m_compiler.compile(
        {c.tmpl, inst->name_expression, target_arch(c.tmpl->manifest, m_ctx.limits.cc)});
    auto tr = request_for(index, *inst, compiled);
    if (!tr) return tr.error();
    tr->reload = true;
    return m_runner.run(*tr, compiled.kernel.cubin);
  }

  // The worker's request for one compiled candidate. A grid that reads max_active_clusters (a
  // persistent kernel) is evaluated again with what the worker measures for this very kernel;
  // a config of which no cluster fits on the GPU comes back as a resource_error result.
  std::expected<TrialRequest, TrialResult> request_for(size_t index, const Instance& inst,
                                                       const CompileResult& compiled) {
    const Candidate& c = m_candidates[index];
    auto failed = [&](Outcome o, std::string message) {
      TrialResult r;
      r.id = index;
      r.outcome = o;
      r.message = std::move(message);
      return std::unexpected(std::move(r));
    };
    if (!inst.grid_reads_max_active_clusters)
      return trial_request(index, c, inst, compiled, m_req.problem, m_req.timing);
    auto n = m_runner.occupancy(compiled.kernel.lowered_name, inst.launch, compiled.kernel.cubin);
    if (!n) return failed(Outcome::crash, "occupancy query: " + n.error().message);
    if (n->first < 1) return failed(Outcome::resource_error, "occupancy: " + n->second);
    auto again = instantiate(*c.tmpl, m_req.problem, m_ctx.limits, c.params, n->first);
    if (!again) return failed(Outcome::invalid, again.error().message);
    return trial_request(index, c, *again, compiled, m_req.problem, m_req.timing);
  }

  // Interleaved re-timing of the finalists, taken again when foreign work disturbed it.
  Result<std::vector<std::pair<std::uint64_t, Timing>>> retime(
      const std::vector<std::uint64_t>& ids) {
    for (int take = 0;; ++take) {
      const std::uint64_t before = disturbance();
      const int rounds = m_req.retime_rounds > 0 ? m_req.retime_rounds
                                                 : std::max(5, 3 * static_cast<int>(ids.size()));
      auto r = m_runner.retime(ids, rounds, m_req.timing);
      if (!r || before == disturbance() || take == k_max_retakes) return r;
      ++m_stats.retaken;
      if (!acquire_gpu()) return stopped_error();
    }
  }

  // --- commit: the winner record, with provenance ---
  Result<TuneResult> commit() {
    // The ranking is by the interleaved re-timing; each entry keeps its spread so a reader can
    // see which ones are within noise of each other.
    const size_t chosen = m_ranking.front();
    m_result.winner_trial_id = chosen;
    WinnerRecord& w = m_result.winner;
    w.device = m_ctx.device;
    w.problem = m_req.problem;
    w.validators = Validators{m_ctx.driver, m_ctx.nvrtc, k_store_format_version};
    for (size_t i : m_ranking) {
      const Candidate& c = m_candidates[i];
      auto inst = instantiate(*c.tmpl, m_req.problem, m_ctx.limits, c.params);
      RankedConfig rc;
      rc.template_name = c.template_name;
      rc.template_hash = c.tmpl->hash;
      rc.params = c.params;
      rc.median_us = m_final_timing[i].median_us;
      rc.spread_pct = m_final_timing[i].spread_pct();
      if (inst) {
        rc.tflops = inst->tflops_at(rc.median_us);
        rc.gbps = inst->gbps_at(rc.median_us);
      }
      w.ranked.push_back(rc);
    }
    w.ref_error = m_ok_results[chosen].ref_error;
    // The winner's own clocks and power, read while its trial ran (the runner's last reply is
    // the re-timing's, pooled over every finalist and cuBLAS).
    keep_telemetry(w, m_ok_results[chosen].telemetry);
    w.node_id = m_ctx.node_id;
    w.timestamp = unix_now();
    w.trials = m_stats.trials;
    w.strategy = std::string(m_strategy->name());
    w.timing_l2 = m_req.timing.l2;
    if (m_store && m_req.store_winner)
      if (auto ok = put_winner(*m_store, w); !ok) return std::unexpected(ok.error());
    return std::move(m_result);
  }

  // --- shared steps ---
  Result<TuneResult> finish(Result<TuneResult> r) {
    m_stats.respawns = m_runner.respawns() - m_respawns_before;
    m_stats.wall_s = seconds_since(m_t0);
    if (r) r->stats = m_stats;
    return r;
  }

  void note_success(size_t index, const TrialResult& r) {
    ++m_ok_count;
    if (r.timing.median_us < m_best_us) {
      m_best_us = r.timing.median_us;
      m_best_index = index;
    }
    m_ok_results[index] = r;
  }

  void count(Outcome outcome) {
    ++m_stats.trials;
    switch (outcome) {
      case Outcome::compile_error:
        ++m_stats.compile_errors;
        break;
      case Outcome::resource_error:
        ++m_stats.resource_errors;
        break;
      case Outcome::wrong_result:
        ++m_stats.wrong_results;
        break;
      case Outcome::crash:
        ++m_stats.crashes;
        break;
      case Outcome::timeout:
        ++m_stats.timeouts;
        break;
      default:
        break;
    }
  }

  void report_progress(std::optional<Outcome> last = {}) {
    if (!m_progress) return;
    TuneProgress pr;
    pr.last_outcome = last;
    pr.trials = m_stats.trials;
    pr.reused = m_stats.reused;
    pr.budget_trials = m_max_trials;
    pr.ok = m_ok_count;
    pr.failed = m_stats.trials - m_ok_count;
    pr.best_us = std::isfinite(m_best_us) ? m_best_us : 0;
    pr.best = m_best_index == CandidateSet::npos ? "" : describe(m_candidates[m_best_index]);
    pr.elapsed_s = seconds_since(m_t0);
    const int measured = m_stats.trials - m_stats.reused;  // reused trials took no time here
    pr.eta_s = measured > 0 ? pr.elapsed_s / measured * (m_max_trials - m_stats.trials) : 0;
    if (m_req.budget.max_seconds > 0)
      pr.eta_s = std::min(pr.eta_s, std::max(0.0, m_req.budget.max_seconds - pr.elapsed_s));
    m_progress(pr);
  }

  // TuneControl, each hook optional. Once cancelled or refused the GPU, the job stays stopped;
  // after a cancel, acquire_gpu() is still asked (finish_on_cancel re-times the finalists).
  bool cancel_requested() {
    if (m_stop == Stop::none && m_req.control.cancelled && m_req.control.cancelled())
      m_stop = Stop::cancelled;
    return m_stop != Stop::none;
  }
  bool acquire_gpu() {
    if (m_stop == Stop::gpu_refused) return false;
    if (m_req.control.acquire_gpu && !m_req.control.acquire_gpu()) {
      m_stop = Stop::gpu_refused;
      return false;
    }
    return true;
  }
  std::uint64_t disturbance() const {
    return m_req.control.disturbance ? m_req.control.disturbance() : 0;
  }

  std::unexpected<Error> stopped_error() const {
    return fail(ErrorCode::cancelled, "tuning " + m_req.problem.describe() + " stopped after " +
                                          std::to_string(m_stats.trials) + " trials");
  }
  std::unexpected<Error> nothing_passed_error() const {
    const TuneStats& s = m_stats;
    return fail(ErrorCode::not_found, "no config of " + m_req.problem.describe() +
                                          " passed verification in " + std::to_string(s.trials) +
                                          " trials (" + std::to_string(s.compile_errors) +
                                          " compile errors, " + std::to_string(s.wrong_results) +
                                          " wrong results, " + std::to_string(s.resource_errors) +
                                          " resource errors, " + std::to_string(s.crashes) +
                                          " crashes, " + std::to_string(s.timeouts) + " timeouts)");
  }

  const TemplateRegistry& m_templates;
  Compiler& m_compiler;
  Store* m_store;
  TrialRunner& m_runner;
  const TuneContext& m_ctx;
  const TuneRequest& m_req;
  const TuningJob::ProgressFn& m_progress;
  const Clock::time_point m_t0 = Clock::now();
  const int m_respawns_before;

  TuneResult m_result;
  TuneStats m_stats;
  Stop m_stop = Stop::none;

  std::vector<const KernelTemplate*> m_job_templates;
  CandidateSet m_candidates;
  std::unique_ptr<Strategy> m_strategy;
  int m_max_trials = 0;  // the budget's, or the candidate count when smaller

  std::deque<Pending> m_pending;  // proposed, compiling, not yet measured
  int m_proposed = 0;             // reused trials count as proposed
  bool m_strategy_done = false;

  std::map<size_t, TrialResult> m_ok_results;  // by candidate index
  std::map<size_t, int> m_worker_of;  // candidate -> the worker (respawn count) that holds it
  double m_best_us = std::numeric_limits<double>::infinity();
  size_t m_best_index = CandidateSet::npos;
  int m_ok_count = 0;

  std::vector<size_t> m_ranking;  // finalists, fastest first
  std::map<size_t, Timing> m_final_timing;
};

}  // namespace

TuningJob::TuningJob(const TemplateRegistry& templates, Compiler& compiler, Store* store,
                     TrialRunner& runner, TuneContext context)
    : m_templates(templates),
      m_compiler(compiler),
      m_store(store),
      m_runner(runner),
      m_ctx(std::move(context)) {}

Result<TuneResult> TuningJob::run(const TuneRequest& request, const ProgressFn& progress) {
  return JobRun(m_templates, m_compiler, m_store, m_runner, m_ctx, request, progress).run();
}

}  // namespace ktune
