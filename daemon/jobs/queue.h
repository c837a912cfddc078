// JobQueue: the durable queue of tuning jobs, in the store's `jobs` table.
//
// A job is one problem on one device class: queued -> running -> done | failed | cancelled.
// Submitting a problem that already has a queued or running job returns that job (dedupe by
// device class + problem key). Lanes claim the queued job of their device class with the highest
// priority (ties: oldest first). State changes are written with sync; progress is kept in memory
// and written every few seconds (a lost progress write costs nothing: trials are in the trials
// table). A job found `running` at start was cut short by a crash and is queued again. Watchers
// get an event per change. The k_finished_kept jobs finished last are kept (for `jobs` and
// `job`); the others are deleted, so a node that tunes for months keeps a bounded table and
// claims scan a bounded map. Thread-safe.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "store/records.h"

namespace ktune {

struct JobSpec {
  DeviceClass device;
  Problem problem;
  std::string origin;  // request | miss | plan
  double priority = 0;
  std::string strategy;
  int budget_trials = 0;
  double budget_seconds = 0;
  std::vector<std::string> templates;  // empty: every template for the op
  // Measured right after the heuristics' configs where a space holds them.
  std::vector<Params> seeds;
};

class JobQueue {
 public:
  static constexpr size_t k_finished_kept = 5000;

  // REQUIRES: `store` outlives the queue.
  JobQueue(Store& store, int max_queued);

  // Reads the jobs table; running jobs go back to queued (they resume). Returns how many.
  Result<int> load();

  struct Submitted {
    JobRecord job;
    bool created = false;  // false: an existing queued/running job for the same key
  };
  // ErrorCode::unavailable when max_queued jobs are waiting already.
  Result<Submitted> submit(const JobSpec& spec);
  // Every spec, or none when their new jobs do not all fit under max_queued (a plan is queued
  // whole). Specs for a key already queued or running (or twice in `specs`) create nothing.
  // A store failure part-way leaves the jobs written before it queued.
  Result<std::vector<Submitted>> submit_all(const std::vector<JobSpec>& specs);

  // Blocks until a queued job for one of `device_ids` exists, claims it (running, lane) and
  // returns it; nullopt once stop() was called.
  std::optional<JobRecord> claim(const std::set<std::string>& device_ids, int lane);
  // Progress of a running job (in memory, persisted at most every few seconds).
  void progress(const std::string& id, int trials, int reused, double best_us,
                const std::string& best);
  // Ends a job: done, failed or cancelled, with a message.
  Result<JobRecord> finish(const std::string& id, JobState state, const std::string& message);
  // Puts a running job back in the queue (daemon stopping: it resumes at the next start).
  void requeue(const std::string& id);
  // Puts a running job back in the queue, not to be claimed again for `wait` (another node of
  // the fleet is tuning its key); `message` says why. The wait is not persisted.
  void defer(const std::string& id, std::chrono::milliseconds wait, const std::string& message);
  // Ends the queued (not running) job for this key as done with `message` (another node's winner
  // arrived). False when there is no such job.
  bool complete_queued(const DeviceClass& device, const Problem& problem,
                       const std::string& message);
  // Cancels a queued or running job (a running one stops at its next trial). not_found for an
  // unknown id; a finished job is returned as it is.
  Result<JobRecord> cancel(const std::string& id);
  bool cancel_requested(const std::string& id) const;

  std::optional<JobRecord> get(const std::string& id) const;
  // Newest first, at most `limit`; `state` filters when set.
  std::vector<JobRecord> list(size_t limit, std::optional<JobState> state = {}) const;
  std::map<JobState, int> counts() const;
  int queued() const;

  // Why a watcher is called.
  enum class WatchEvent {
    changed,  // the job's current state (at once, then on every change)
    stopped,  // the queue stopped (the daemon is stopping) before the job ended: the last call,
              // made at stop() or, for a running job, once its lane has put it back
  };
  using Watcher = std::function<bool(const JobRecord&, WatchEvent)>;
  // Calls `fn` with the job on every change until it returns false or the job ends (the call
  // with the final state is the last), or the queue stops (a last `stopped` call). Called at
  // once with the current state. Returns false for an unknown id. `fn` runs under the queue's
  // lock: it must be short and never call the queue.
  bool watch(const std::string& id, Watcher fn);

  // Wakes every claim() for good and ends the watches (WatchEvent::stopped) of jobs not running;
  // those of a running job end when it is requeued or finishes.
  void stop();
  // claim() calls waiting for a job now (lanes with nothing to do).
  int waiting_claims() const;

 private:
  int queued_locked() const;
  Result<Submitted> submit_locked(const JobSpec& spec);
  Result<JobRecord> finish_locked(JobRecord& job, JobState state, const std::string& message);
  void persist_locked(const JobRecord& job);
  void notify_locked(const JobRecord& job);
  // Forgets the oldest finished jobs past k_finished_kept, here and in the store.
  void prune_locked();
  static bool terminal(JobState s) {
    return s == JobState::done || s == JobState::failed || s == JobState::cancelled;
  }

  Store& m_store;
  const int m_max_queued;
  mutable std::mutex m_mutex;
  std::condition_variable m_cv;
  std::map<std::string, JobRecord> m_jobs;             // by id (creation order)
  std::map<std::string, std::string> m_active_by_key;  // device/problem -> id, queued or running
  std::set<std::string> m_cancel;                      // running jobs asked to stop
  // Deferred jobs (another node tunes their key): not claimed before this time.
  std::map<std::string, std::chrono::steady_clock::time_point> m_not_before;
  std::map<std::string, std::int64_t> m_last_persist;  // id -> unix seconds
  std::multimap<std::string, Watcher> m_watchers;
  // Done, failed and cancelled jobs as (finish order, id): the longest finished first (the
  // order counts finishes; a loaded table is ordered by its `finished` seconds, then ids).
  std::set<std::pair<std::uint64_t, std::string>> m_finished;
  std::uint64_t m_finishes = 0;
  std::uint64_t m_next_id = 1;
  bool m_stopped = false;
  int m_waiting_claims = 0;
};

}  // namespace ktune
