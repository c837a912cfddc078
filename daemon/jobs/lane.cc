#include "daemon/jobs/lane.h"

#include "config/log.h"
#include "tuner/tuning_job.h"

namespace ktune {

namespace {

// Why the merge rule kept the stored winner over a job's (store/table_io.h prefer_incoming).
std::string kept_reason(Store& store, const WinnerRecord& measured) {
  auto stored = get_winner(store, measured.device, measured.problem);
  if (!stored || !*stored) return "the stored winner ranks first; kept it";
  const WinnerRecord& s = **stored;
  if (s.timing_l2 != measured.timing_l2)
    return "the stored winner was timed with the L2 " + std::string(to_string(s.timing_l2)) +
           ", this job's " + std::string(to_string(measured.timing_l2)) +
           ": times taken differently are not compared, and the merge rule keeps the " +
           std::string(to_string(s.timing_l2)) + " one; kept it";
  return "the stored winner is faster (" + std::to_string(s.ranked.front().median_us) +
         " us); kept it";
}

GpuPolicyOptions gate_options(const DaemonConfig& c) {
  return gpu_policy_options(c).value_or(GpuPolicyOptions{});  // the config was validated
}

RunnerOptions runner_options(const DaemonConfig& c, int ordinal) {
  RunnerOptions o;
  if (!c.worker_binary.empty()) o.worker_binary = c.worker_binary;
  o.ordinal = ordinal;
  o.trial_timeout_ms = c.trial_timeout_ms;
  return o;
}

}  // namespace

Lane::Lane(TuningDeps deps, GpuMonitor& monitor, GpuInfo gpu)
    : m_deps(deps),
      m_gpu(std::move(gpu)),
      m_runner(runner_options(deps.config, m_gpu.ordinal)),
      m_gate(gate_options(deps.config), monitor, m_gpu.ordinal, m_gpu.pci_bus_id, [this] {
        // Our own worker is not foreign work.
        std::vector<std::uint32_t> own;
        if (const int pid = m_runner.worker_pid(); pid > 0) own.push_back(std::uint32_t(pid));
        return own;
      }) {}

Lane::~Lane() {
  stop();
}

void Lane::start() {
  m_gate.start();
  m_thread = std::thread([this] { loop(); });
}

void Lane::request_stop() {
  m_stop = true;
  m_gate.stop();
}

void Lane::stop() {
  request_stop();
  if (m_thread.joinable()) m_thread.join();
}

void Lane::loop() {
  const std::set<std::string> classes{m_gpu.device_class.id()};
  auto stopping = [this] { return m_stop.load(); };
  while (!m_stop) {
    // Jobs stay queued while the GPU is not ours (gpu_policy never, foreign work): a job is
    // claimed only by a lane that can start it.
    if (!m_gate.acquire(stopping)) break;
    auto job = m_deps.jobs.claim(classes, m_gpu.ordinal);
    if (!job) break;  // the queue stopped
    if (m_stop) {     // asked to stop between the gate and the claim: not started, back it goes
      m_deps.jobs.requeue(job->id);
      break;
    }
    set_state(State::tuning, &*job);
    run_job(*job);
    set_state(State::idle, nullptr);
  }
}

void Lane::set_state(State state, const JobRecord* job) {
  std::lock_guard lock(m_mutex);
  account_locked();
  m_state = state;
  if (job) m_job = *job;
  if (state == State::idle) m_job = JobRecord();
}

std::vector<Params> Lane::neighbour_seeds(const Problem& problem) const {
  std::vector<Params> seeds;
  const auto near = m_deps.catalog.index().nearest(m_gpu.device_class.id(), problem,
                                                   2 * m_deps.config.nearest_radius, 4);
  for (const auto& n : near)
    for (size_t i = 0; i < n.record->ranked.size() && i < 3; ++i)
      seeds.push_back(n.record->ranked[i].params);
  return seeds;
}

void Lane::run_job(const JobRecord& job) {
  const std::string& id = job.id;
  const std::unique_ptr<Claim> claim = claim_key(job);
  if (!claim) return;
  log(LogLevel::info, "job_started",
      {{"job", id},
       {"lane", m_gpu.ordinal},
       {"problem", job.problem.key()},
       {"reused_trials", job.trials_done}});
  m_runner.reset_respawn_budget();  // the allowance is per job, the lane lives for days
  if (auto ok = m_runner.start(); !ok) {
    end_job(job, JobState::failed, "worker did not start: " + ok.error().message);
    return;
  }
  TuneRequest req;
  req.problem = job.problem;
  req.strategy = job.strategy;
  req.budget = Budget{job.budget_trials, job.budget_seconds, 0};
  req.finalists = m_deps.config.finalists;
  req.retime_rounds = m_deps.config.retime_rounds;
  req.timing.l2 = parse_timing_l2(m_deps.config.timing_l2).value_or(TimingL2::flushed);
  req.job_id = id;
  req.resume = true;
  req.store_winner = false;  // the catalog commits it
  // The job's own seeds first, then the winners of neighbouring shapes.
  req.templates = job.templates;
  req.seeds = job.seeds;
  for (auto& s : neighbour_seeds(job.problem)) req.seeds.push_back(std::move(s));
  auto cancelled = [this, id, c = claim.get()] {
    return m_stop || m_deps.jobs.cancel_requested(id) || c->lost();
  };
  req.control.cancelled = cancelled;
  req.control.acquire_gpu = [this, cancelled, c = claim.get()] {
    if (m_gate.allowed()) return !cancelled();
    set_state(State::paused, nullptr);
    c->pause();  // a fleet's lease is not renewed while the lane waits: another node may take it
    const bool ok = m_gate.acquire(cancelled);
    c->resume();
    set_state(State::tuning, nullptr);
    return ok && !cancelled();  // the key may have gone to another node meanwhile
  };
  req.control.disturbance = [this] {
    m_gate.sample_now();  // the GPU as the trial started/ended, not as of the last poll
    return m_gate.disturbance();
  };

  const TuneContext ctx{m_gpu.device_class, m_gpu.limits, m_deps.node.driver, m_deps.node.nvrtc,
                        m_deps.node.node_id};
  // The job keeps the templates it started with to its end (its compiles point into them), even
  // if a reload serves others meanwhile; a winner of a template changed since commits as stale.
  const TemplateSet::Snapshot templates = m_deps.templates.current();
  TuningJob tuning(*templates, m_deps.compiler, &m_deps.store, m_runner, ctx);
  auto result = tuning.run(req, [this, id, c = claim.get()](const TuneProgress& p) {
    if (p.last_outcome) m_deps.metrics.count_trial(to_string(*p.last_outcome));
    if (p.last_outcome) c->trial_recorded();
    m_deps.jobs.progress(id, p.trials, p.reused, p.best_us, p.best);
    std::lock_guard lock(m_mutex);
    m_job.trials_done = p.trials;
    m_job.budget_trials = p.budget_trials;  // the job's own cap: at most its candidates
    m_job.best_us = p.best_us;
  });
  if (result) return commit_result(job, result->winner, *claim);
  if (result.error().code == ErrorCode::cancelled) {
    if (claim->lost())  // another node took the key over: wait for its winner (or its lease)
      m_deps.jobs.defer(id, std::chrono::milliseconds(0),
                        "another node claimed the key after this node's lease ran out");
    else if (m_stop)
      m_deps.jobs.requeue(id);  // the daemon is stopping: resume at the next start
    else
      end_job(job, JobState::cancelled, "cancelled by a client");
    return;
  }
  end_job(job, JobState::failed, result.error().message);
}

void Lane::end_job(const JobRecord& job, JobState state, const std::string& message) {
  (void)m_deps.jobs.finish(job.id, state, message);
  if (state == JobState::failed) m_deps.misses.failed(job.device.id(), job.problem);
}

std::unique_ptr<Claim> Lane::claim_key(const JobRecord& job) {
  WorkClaims& claims = m_deps.claims ? *m_deps.claims : local_claims();
  ClaimOutcome outcome = claims.acquire(job);
  switch (outcome.kind) {
    case ClaimOutcome::Kind::tune:
      if (outcome.shared_trials > 0)
        log(LogLevel::info, "job_takes_over",
            {{"job", job.id}, {"shared_trials", outcome.shared_trials}});
      return std::move(outcome.claim);
    case ClaimOutcome::Kind::wait:
      m_deps.jobs.defer(job.id, outcome.wait, outcome.message);
      return nullptr;
    case ClaimOutcome::Kind::done:
      (void)m_deps.jobs.finish(job.id, JobState::done, outcome.message);
      return nullptr;
  }
  return nullptr;
}

void Lane::commit_result(const JobRecord& job, const WinnerRecord& winner, Claim& claim) {
  const std::string& id = job.id;
  if (claim.publish(winner) == Claim::Verdict::fenced) {
    (void)m_deps.jobs.finish(id, JobState::done,
                             "measured, but another node claimed the key after this node's "
                             "lease ran out: its result stands, this one was dropped");
    return;
  }
  auto committed = m_deps.catalog.commit(winner, "job " + id);
  const auto& best = winner.ranked.front();
  std::string msg = best.template_name + " {" + params_to_string(best.params) + "} " +
                    std::to_string(best.median_us) + " us";
  if (!committed)
    msg = "measured, but the winner could not be stored: " + committed.error().message;
  else if (!*committed)
    msg += " (" + kept_reason(m_deps.store, winner) + ")";
  end_job(job, committed ? JobState::done : JobState::failed, msg);
}

void Lane::account_locked() const {
  const auto now = std::chrono::steady_clock::now();
  const double dt = std::chrono::duration<double>(now - m_last_account).count();
  m_last_account = now;
  switch (m_state) {
    case State::idle:
      m_seconds_idle += dt;
      break;
    case State::tuning:
      m_seconds_tuning += dt;
      break;
    case State::paused:
      m_seconds_paused += dt;
      break;
  }
}

LaneStatus Lane::status() const {
  std::lock_guard lock(m_mutex);
  account_locked();
  LaneStatus s;
  s.ordinal = m_gpu.ordinal;
  s.device = m_gpu.device_class.id();
  const auto gate = m_gate.state();
  s.reason = gate.reason;
  if (m_stop)
    s.state = "stopped";
  else if (m_state == State::idle)
    s.state = "idle";
  else  // the gate's view is current; the lane notices at its next trial
    s.state = m_state == State::paused || !gate.allowed ? "paused" : "tuning";
  s.job = m_job.id;
  s.problem = m_job.problem.key();
  s.trials = m_job.trials_done;
  s.budget_trials = m_job.budget_trials;
  s.best_us = m_job.best_us;
  s.worker_pid = m_runner.worker_pid();
  s.seconds_tuning = m_seconds_tuning;
  s.seconds_paused = m_seconds_paused;
  s.seconds_idle = m_seconds_idle;
  s.gpu_allowed = gate.allowed;
  const GateTimes times = m_gate.times();
  s.gpu_allowed_s = times.allowed_s;
  s.gpu_paused_s = times.paused_s;
  s.disturbances = m_gate.disturbance();
  return s;
}

}  // namespace ktune
