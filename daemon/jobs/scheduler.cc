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
  // Every lane first: a lane whose job sees the queue stopped before the lane was asked to stop
  // would end the job as cancelled instead of putting it back.
  for (auto& l : m_lanes) l->request_stop();
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
  const std::vector<LaneStatus> all = lanes();  // one snapshot for every family
  std::string s;
  // One metric family: its header, then one sample per lane from `sample` ("{labels} value").
  auto family = [&](std::string_view name, std::string_view help, std::string_view type,
                    const auto& sample) {
    s += "# HELP " + std::string(name) + " " + std::string(help) + "\n# TYPE " + std::string(name) +
         " " + std::string(type) + "\n";
    for (const auto& l : all) sample(std::string(name), l);
  };
  auto number = [](double v) { return std::to_string(v); };
  family("ktune_lane_seconds_total", "Seconds each tuning lane spent per state.", "counter",
         [&](const std::string& name, const LaneStatus& l) {
           const std::string lane = "{lane=\"" + std::to_string(l.ordinal) + "\",state=";
           s += name + lane + "\"tuning\"} " + number(l.seconds_tuning) + "\n";
           s += name + lane + "\"paused\"} " + number(l.seconds_paused) + "\n";
           s += name + lane + "\"idle\"} " + number(l.seconds_idle) + "\n";
         });
  family("ktune_lane_paused", "Whether a lane is paused for foreign work (1) or not (0).", "gauge",
         [&](const std::string& name, const LaneStatus& l) {
           s += name + "{lane=\"" + std::to_string(l.ordinal) + "\"} " +
                (l.state == "paused" ? "1" : "0") + "\n";
         });
  auto per_gpu = [&](std::string_view name, std::string_view help, std::string_view type,
                     auto value) {
    family(name, help, type, [&](const std::string& n, const LaneStatus& l) {
      s += n + "{gpu=\"" + std::to_string(l.ordinal) + "\"} " + value(l) + "\n";
    });
  };
  per_gpu("ktune_gpu_tuning_allowed", "Whether the GPU policy lets the lane use its GPU.", "gauge",
          [](const LaneStatus& l) { return std::string(l.gpu_allowed ? "1" : "0"); });
  per_gpu("ktune_gpu_paused_seconds_total", "Seconds the GPU policy kept the lane off its GPU.",
          "counter", [&](const LaneStatus& l) { return number(l.gpu_paused_s); });
  per_gpu("ktune_gpu_allowed_seconds_total", "Seconds the GPU policy allowed tuning.", "counter",
          [&](const LaneStatus& l) { return number(l.gpu_allowed_s); });
  per_gpu("ktune_gpu_disturbances_total", "Times foreign work interrupted tuning.", "counter",
          [](const LaneStatus& l) { return std::to_string(l.disturbances); });
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

// How often the tracker folds what the lookup caches counted and misses become jobs. A fold
// records each answer hit since the last one once (a re-rank in the tracker's ordered set, ~1 us
// of cache misses): under Zipf traffic over 10,000 shapes most of them are hit within any 250 ms,
// so folding every second records ~3x fewer. A job waits up to this long for its miss, which no
// tuning run (tens of seconds) notices.
constexpr auto k_promote_interval = std::chrono::seconds(1);

void Scheduler::promoter_loop() {
  std::unique_lock lock(m_mutex);
  while (!m_stopping) {
    lock.unlock();
    // Misses counted on cached answers reach the tracker here at the latest (with tune_on_miss
    // off too: what the sources hold stays bounded by k_promote_interval of traffic).
    m_deps.misses.fold();
    promote_misses();
    lock.lock();
    m_cv.wait_for(lock, k_promote_interval, [this] { return m_stopping; });
  }
}

}  // namespace ktune
