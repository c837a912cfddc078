#include "daemon/jobs/scheduler.h"

#include "config/log.h"
#include "daemon/jobs/lane.h"
#include "tuner/gpu_monitor.h"

namespace ktune {

protocol::Json to_json(const LaneStatus& l) {
  return protocol::Json{
      {"ordinal", l.ordinal},
      {"device", l.device},
      {"state", l.state},
      {"job", l.job},
      {"problem", l.problem},
      {"trials", l.trials},
      {"budget_trials", l.budget_trials},
      {"best_us", l.best_us},
      {"reason", l.reason},
      {"worker_pid", l.worker_pid},
      {"seconds",
       {{"tuning", l.seconds_tuning}, {"paused", l.seconds_paused}, {"idle", l.seconds_idle}}}};
}

Scheduler::Scheduler(TuningDeps deps) : m_deps(deps) {}

Scheduler::~Scheduler() {
  stop();
}

Result<void> Scheduler::start() {
  if (!m_deps.node.gpus.empty()) {
    auto monitor = make_gpu_monitor();
    if (!monitor) {
      // Without NVML the idle policy cannot see foreign work: it then never tunes (the gate
      // says why in `ktune status`); "always" and "never" do not need it.
      log(LogLevel::warn, "gpu_monitor_unavailable", {{"error", monitor.error().message}});
      m_monitor = make_unavailable_monitor(monitor.error());
    } else {
      m_monitor = std::move(*monitor);
    }
  }
  for (const auto& g : m_deps.node.gpus) {
    m_lanes.push_back(std::make_unique<Lane>(m_deps, *m_monitor, g));
    m_lanes.back()->start();
    log(LogLevel::info, "lane_started",
        {{"ordinal", g.ordinal},
         {"device", g.device_class.id()},
         {"policy", m_deps.config.gpu_policy}});
  }
  m_promoter = std::thread([this] { promoter_loop(); });
  return {};
}

void Scheduler::stop() {
  {
    std::lock_guard lock(m_mutex);
    if (m_stopping) return;
    m_stopping = true;
  }
  m_cv.notify_all();
  if (m_promoter.joinable()) m_promoter.join();
  m_deps.jobs.stop();  // wakes lanes waiting for a job
  for (auto& l : m_lanes) l->stop();
}

bool Scheduler::can_tune(const std::string& device_id) const {
  return m_deps.node.owns(device_id) && !m_lanes.empty();
}

std::vector<LaneStatus> Scheduler::lanes() const {
  std::vector<LaneStatus> out;
  for (const auto& l : m_lanes) out.push_back(l->status());
  return out;
}

std::string Scheduler::metrics_text() const {
  std::string s =
      "# HELP ktune_lane_seconds_total Seconds each tuning lane spent per state.\n"
      "# TYPE ktune_lane_seconds_total counter\n";
  std::string busy =
      "# HELP ktune_lane_paused Whether a lane is paused for foreign work (1) or not (0).\n"
      "# TYPE ktune_lane_paused gauge\n";
  for (const auto& l : lanes()) {
    const std::string lane = "lane=\"" + std::to_string(l.ordinal) + "\"";
    s += "ktune_lane_seconds_total{" + lane + ",state=\"tuning\"} " +
         std::to_string(l.seconds_tuning) + "\n";
    s += "ktune_lane_seconds_total{" + lane + ",state=\"paused\"} " +
         std::to_string(l.seconds_paused) + "\n";
    s += "ktune_lane_seconds_total{" + lane + ",state=\"idle\"} " + std::to_string(l.seconds_idle) +
         "\n";
    busy += "ktune_lane_paused{" + lane + "} " + (l.state == "paused" ? "1" : "0") + "\n";
  }
  s += busy;
  std::string allowed =
      "# HELP ktune_gpu_tuning_allowed Whether the GPU policy lets the lane use its GPU.\n"
      "# TYPE ktune_gpu_tuning_allowed gauge\n";
  std::string paused_s =
      "# HELP ktune_gpu_paused_seconds_total Seconds the GPU policy kept the lane off its GPU.\n"
      "# TYPE ktune_gpu_paused_seconds_total counter\n";
  std::string allowed_s =
      "# HELP ktune_gpu_allowed_seconds_total Seconds the GPU policy allowed tuning.\n"
      "# TYPE ktune_gpu_allowed_seconds_total counter\n";
  std::string disturbed =
      "# HELP ktune_gpu_disturbances_total Times foreign work interrupted tuning.\n"
      "# TYPE ktune_gpu_disturbances_total counter\n";
  for (const auto& l : lanes()) {
    const std::string gpu = "{gpu=\"" + std::to_string(l.ordinal) + "\"} ";
    allowed += "ktune_gpu_tuning_allowed" + gpu + (l.gpu_allowed ? "1" : "0") + "\n";
    paused_s += "ktune_gpu_paused_seconds_total" + gpu + std::to_string(l.gpu_paused_s) + "\n";
    allowed_s += "ktune_gpu_allowed_seconds_total" + gpu + std::to_string(l.gpu_allowed_s) + "\n";
    disturbed += "ktune_gpu_disturbances_total" + gpu + std::to_string(l.disturbances) + "\n";
  }
  s += allowed + paused_s + allowed_s + disturbed;
  s += "# HELP ktune_miss_jobs_total Missed keys turned into tuning jobs.\n"
       "# TYPE ktune_miss_jobs_total counter\nktune_miss_jobs_total " +
       std::to_string(m_promoted.load()) + "\n";
  return s;
}

void Scheduler::promote_misses() {
  if (!m_deps.config.tune_on_miss) return;
  for (const auto& m : m_deps.misses.due(m_deps.config.miss_threshold_us)) {
    if (!can_tune(m.device.id())) continue;  // stays promoted: this node cannot tune it
    JobSpec spec;
    spec.device = m.device;
    spec.problem = m.problem;
    spec.origin = "miss";
    spec.priority = m.worth_us;
    spec.strategy = m_deps.config.strategy;
    spec.budget_trials = m_deps.config.budget_trials;
    spec.budget_seconds = m_deps.config.budget_seconds;
    auto submitted = m_deps.jobs.submit(spec);
    if (!submitted) {
      m_deps.misses.release(m.device.id(), m.problem);  // the queue is full: try again later
      continue;
    }
    if (submitted->created) ++m_promoted;
  }
}

void Scheduler::promoter_loop() {
  std::unique_lock lock(m_mutex);
  while (!m_stopping) {
    lock.unlock();
    promote_misses();
    lock.lock();
    m_cv.wait_for(lock, std::chrono::milliseconds(250), [this] { return m_stopping; });
  }
}

}  // namespace ktune
