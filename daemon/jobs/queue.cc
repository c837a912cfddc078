#include "daemon/jobs/queue.h"

#include <algorithm>
#include <cstdio>
#include <ctime>

#include "config/log.h"

namespace ktune {
namespace {

std::int64_t unix_now() {
  return std::int64_t(std::time(nullptr));
}

std::string job_key(const DeviceClass& device, const Problem& problem) {
  return device.id() + "/" + problem.key();
}

std::string make_id(std::uint64_t n) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%012llu", static_cast<unsigned long long>(n));
  return buf;
}

}  // namespace

JobQueue::JobQueue(Store& store, int max_queued) : m_store(store), m_max_queued(max_queued) {}

Result<int> JobQueue::load() {
  auto jobs = scan_jobs(m_store);
  if (!jobs) return std::unexpected(jobs.error());
  std::lock_guard lock(m_mutex);
  int resumed = 0;
  std::vector<std::pair<std::int64_t, std::string>> loaded_finished;
  for (auto& j : *jobs) {
    if (j.state == JobState::running) {
      j.state = JobState::queued;
      j.lane = -1;
      j.message = "resumed after the daemon stopped mid-job";
      j.updated = unix_now();
      ++resumed;
      persist_locked(j);
    }
    if (!terminal(j.state))
      m_active_by_key[job_key(j.device, j.problem)] = j.id;
    else
      loaded_finished.emplace_back(j.finished, j.id);
    m_next_id = std::max<std::uint64_t>(m_next_id, std::strtoull(j.id.c_str(), nullptr, 10) + 1);
    m_jobs[j.id] = std::move(j);
  }
  std::sort(loaded_finished.begin(), loaded_finished.end());
  for (auto& [_, id] : loaded_finished) m_finished.emplace(++m_finishes, std::move(id));
  prune_locked();  // a table written before jobs were pruned
  return resumed;
}

Result<JobQueue::Submitted> JobQueue::submit(const JobSpec& spec) {
  std::lock_guard lock(m_mutex);
  return submit_locked(spec);
}

Result<std::vector<JobQueue::Submitted>> JobQueue::submit_all(const std::vector<JobSpec>& specs) {
  std::lock_guard lock(m_mutex);
  std::set<std::string> new_keys;
  for (const auto& s : specs)
    if (const std::string key = job_key(s.device, s.problem); !m_active_by_key.contains(key))
      new_keys.insert(key);
  if (!new_keys.empty() && queued_locked() + int(new_keys.size()) > m_max_queued)
    return fail(ErrorCode::unavailable,
                std::to_string(new_keys.size()) + " new jobs do not fit: " +
                    std::to_string(queued_locked()) + " of " + std::to_string(m_max_queued) +
                    " are queued already (tuning.max_queued_jobs); nothing queued");
  std::vector<Submitted> out;
  for (const auto& s : specs) {
    auto submitted = submit_locked(s);
    if (!submitted) return std::unexpected(submitted.error());
    out.push_back(std::move(*submitted));
  }
  return out;
}

Result<JobQueue::Submitted> JobQueue::submit_locked(const JobSpec& spec) {
  const std::string key = job_key(spec.device, spec.problem);
  if (auto it = m_active_by_key.find(key); it != m_active_by_key.end()) {
    JobRecord& existing = m_jobs.at(it->second);
    // A client asking explicitly raises a background job's priority.
    if (spec.priority > existing.priority && existing.state == JobState::queued) {
      existing.priority = spec.priority;
      existing.updated = unix_now();
      persist_locked(existing);
      m_cv.notify_all();
    }
    return Submitted{existing, false};
  }
  if (queued_locked() >= m_max_queued)
    return fail(ErrorCode::unavailable,
                std::to_string(m_max_queued) + " jobs are queued already (tuning.max_queued_jobs)");
  JobRecord j;
  j.id = make_id(m_next_id++);
  j.device = spec.device;
  j.problem = spec.problem;
  j.strategy = spec.strategy;
  j.budget_trials = spec.budget_trials;
  j.budget_seconds = spec.budget_seconds;
  j.templates = spec.templates;
  j.seeds = spec.seeds;
  j.state = JobState::queued;
  j.priority = spec.priority;
  j.origin = spec.origin;
  j.created = j.updated = unix_now();
  if (auto ok = put_job(m_store, j); !ok) return std::unexpected(ok.error());
  m_last_persist[j.id] = j.updated;
  m_active_by_key[key] = j.id;
  m_jobs[j.id] = j;
  log(LogLevel::info, "job_queued",
      {{"job", j.id}, {"key", key}, {"origin", j.origin}, {"priority", j.priority}});
  m_cv.notify_all();
  return Submitted{j, true};
}

std::optional<JobRecord> JobQueue::claim(const std::set<std::string>& device_ids, int lane) {
  std::unique_lock lock(m_mutex);
  while (!m_stopped) {
    JobRecord* best = nullptr;
    const auto now = std::chrono::steady_clock::now();
    auto wake = std::chrono::steady_clock::time_point::max();  // the first deferral to end
    for (auto& [_, j] : m_jobs) {  // creation order: the first of equal priority is the oldest
      if (j.state != JobState::queued || !device_ids.count(j.device.id())) continue;
      if (auto d = m_not_before.find(j.id); d != m_not_before.end()) {
        if (d->second > now) {
          wake = std::min(wake, d->second);
          continue;
        }
        m_not_before.erase(d);
      }
      if (!best || j.priority > best->priority) best = &j;
    }
    if (best) {
      best->state = JobState::running;
      best->lane = lane;
      best->started = best->updated = unix_now();
      persist_locked(*best);
      notify_locked(*best);
      return *best;
    }
    ++m_waiting_claims;
    if (wake == std::chrono::steady_clock::time_point::max())
      m_cv.wait(lock);
    else
      m_cv.wait_until(lock, wake);
    --m_waiting_claims;
  }
  return std::nullopt;
}

void JobQueue::progress(const std::string& id, int trials, int reused, double best_us,
                        const std::string& best) {
  std::lock_guard lock(m_mutex);
  auto it = m_jobs.find(id);
  if (it == m_jobs.end() || it->second.state != JobState::running) return;
  JobRecord& j = it->second;
  j.trials_done = trials;
  j.reused = reused;
  j.best_us = best_us;
  j.best = best;
  j.updated = unix_now();
  if (j.updated - m_last_persist[id] >= 2) persist_locked(j);
  notify_locked(j);
}

Result<JobRecord> JobQueue::finish(const std::string& id, JobState state,
                                   const std::string& message) {
  std::lock_guard lock(m_mutex);
  auto it = m_jobs.find(id);
  if (it == m_jobs.end()) return fail(ErrorCode::not_found, "no job " + id);
  return finish_locked(it->second, state, message);
}

Result<JobRecord> JobQueue::finish_locked(JobRecord& j, JobState state,
                                          const std::string& message) {
  const std::string id = j.id;
  j.state = state;
  j.message = message;
  j.lane = -1;
  j.finished = j.updated = unix_now();
  m_active_by_key.erase(job_key(j.device, j.problem));
  m_cancel.erase(id);
  m_not_before.erase(id);
  m_finished.emplace(++m_finishes, id);  // terminal in memory even if the write below fails
  if (auto ok = put_job(m_store, j); !ok) return std::unexpected(ok.error());
  m_last_persist[id] = j.updated;
  log(LogLevel::info, "job_" + std::string(to_string(state)),
      {{"job", id}, {"trials", j.trials_done}, {"best_us", j.best_us}, {"message", message}});
  notify_locked(j);
  JobRecord out = j;
  prune_locked();
  return out;
}

void JobQueue::prune_locked() {
  // The longest finished go first (a job that waited long and just finished stays). The job
  // with the largest id always stays, so after a restart the next id still follows every id a
  // client was given.
  const std::string newest = m_jobs.empty() ? "" : std::prev(m_jobs.end())->first;
  for (auto it = m_finished.begin();
       m_finished.size() > k_finished_kept && it != m_finished.end();) {
    const std::string id = it->second;
    if (id == newest) {
      ++it;
      continue;
    }
    if (auto ok = m_store.remove(Table::jobs, id, Durability::buffered); !ok) {
      log(LogLevel::warn, "job_prune_failed", {{"job", id}, {"error", ok.error().message}});
      return;  // tried again at the next finish
    }
    it = m_finished.erase(it);
    m_jobs.erase(id);
    m_last_persist.erase(id);
  }
}

void JobQueue::requeue(const std::string& id) {
  std::lock_guard lock(m_mutex);
  auto it = m_jobs.find(id);
  if (it == m_jobs.end() || it->second.state != JobState::running) return;
  it->second.state = JobState::queued;
  it->second.lane = -1;
  it->second.updated = unix_now();
  persist_locked(it->second);
  notify_locked(it->second);
  m_cv.notify_all();
}

void JobQueue::defer(const std::string& id, std::chrono::milliseconds wait,
                     const std::string& message) {
  std::lock_guard lock(m_mutex);
  auto it = m_jobs.find(id);
  if (it == m_jobs.end() || it->second.state != JobState::running) return;
  JobRecord& j = it->second;
  j.state = JobState::queued;
  j.lane = -1;
  j.message = message;
  j.updated = unix_now();
  m_not_before[id] = std::chrono::steady_clock::now() + wait;
  persist_locked(j);
  notify_locked(j);
  m_cv.notify_all();
}

bool JobQueue::complete_queued(const DeviceClass& device, const Problem& problem,
                               const std::string& message) {
  std::lock_guard lock(m_mutex);
  auto it = m_active_by_key.find(job_key(device, problem));
  if (it == m_active_by_key.end()) return false;
  JobRecord& j = m_jobs.at(it->second);
  if (j.state != JobState::queued) return false;
  return finish_locked(j, JobState::done, message).has_value();
}

Result<JobRecord> JobQueue::cancel(const std::string& id) {
  std::lock_guard lock(m_mutex);  // held to the end: a claim between the check and the cancel
                                  // would run a job its client was told is cancelled
  auto it = m_jobs.find(id);
  if (it == m_jobs.end()) return fail(ErrorCode::not_found, "no job " + id);
  JobRecord& j = it->second;
  if (j.state == JobState::running) {
    m_cancel.insert(id);  // the lane ends it at its next trial and calls finish()
    return j;
  }
  if (j.state != JobState::queued) return j;
  return finish_locked(j, JobState::cancelled, "cancelled while queued");
}

bool JobQueue::cancel_requested(const std::string& id) const {
  std::lock_guard lock(m_mutex);
  return m_stopped || m_cancel.count(id) > 0;
}

std::optional<JobRecord> JobQueue::get(const std::string& id) const {
  std::lock_guard lock(m_mutex);
  auto it = m_jobs.find(id);
  if (it == m_jobs.end()) return std::nullopt;
  return it->second;
}

std::vector<JobRecord> JobQueue::list(size_t limit, std::optional<JobState> state) const {
  std::lock_guard lock(m_mutex);
  std::vector<JobRecord> out;
  for (auto it = m_jobs.rbegin(); it != m_jobs.rend() && out.size() < limit; ++it)
    if (!state || it->second.state == *state) out.push_back(it->second);
  return out;
}

std::map<JobState, int> JobQueue::counts() const {
  std::lock_guard lock(m_mutex);
  std::map<JobState, int> c;
  for (JobState s :
       {JobState::queued, JobState::running, JobState::done, JobState::failed, JobState::cancelled})
    c[s] = 0;
  for (const auto& [_, j] : m_jobs) ++c[j.state];
  return c;
}

int JobQueue::queued() const {
  std::lock_guard lock(m_mutex);
  return queued_locked();
}

int JobQueue::queued_locked() const {
  int n = 0;
  for (const auto& [_, j] : m_jobs) n += j.state == JobState::queued;
  return n;
}

bool JobQueue::watch(const std::string& id, Watcher fn) {
  std::lock_guard lock(m_mutex);
  auto it = m_jobs.find(id);
  if (it == m_jobs.end()) return false;
  if (!fn(it->second, WatchEvent::changed) || terminal(it->second.state)) return true;
  if (m_stopped)
    fn(it->second, WatchEvent::stopped);
  else
    m_watchers.emplace(id, std::move(fn));
  return true;
}

void JobQueue::stop() {
  std::lock_guard lock(m_mutex);
  m_stopped = true;
  m_cv.notify_all();
  // A running job's watches end when its lane puts it back (notify_locked): then they can say so.
  std::erase_if(m_watchers, [this](auto& w) {
    const JobRecord& job = m_jobs.at(w.first);
    if (job.state == JobState::running) return false;
    w.second(job, WatchEvent::stopped);
    return true;
  });
}

int JobQueue::waiting_claims() const {
  std::lock_guard lock(m_mutex);
  return m_waiting_claims;
}

void JobQueue::persist_locked(const JobRecord& job) {
  if (auto ok = put_job(m_store, job); !ok)
    log(LogLevel::error, "job_write_failed", {{"job", job.id}, {"error", ok.error().message}});
  m_last_persist[job.id] = unix_now();
}

void JobQueue::notify_locked(const JobRecord& job) {
  auto [first, last] = m_watchers.equal_range(job.id);
  for (auto it = first; it != last;) {
    bool end = !it->second(job, WatchEvent::changed) || terminal(job.state);
    if (!end && m_stopped && job.state != JobState::running) {  // back in the queue at stop
      it->second(job, WatchEvent::stopped);
      end = true;
    }
    it = end ? m_watchers.erase(it) : std::next(it);
  }
}

}  // namespace ktune
