// WorkClaims: what a tuning lane asks before it tunes a key, so that a fleet tunes each key once.
//
// A lane that claimed a job from its queue calls acquire(): `tune` hands it a Claim (it tunes);
// `wait` means another node holds the key (the job goes back to the queue for a while, and the
// node answers lookups nearest/heuristic until the winner arrives); `done` means the fleet has a
// winner for the key already (merged here; the job ends). Without a fleet (fleet.redis unset)
// local_claims() says `tune` every time and changes nothing. The fleet's implementation is
// daemon/fleet/claims.h. Implementations are thread-safe; one Claim is used by one lane.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "store/records.h"

namespace ktune {

// A key this node tunes now. Destroying it gives the key back (if it is still ours).
class Claim {
 public:
  virtual ~Claim() = default;

  // True once another node holds the key (this node's lease ran out and was taken): the job
  // should stop; its trials stay in the store.
  virtual bool lost() const = 0;
  // A trial of the job was recorded in the local store: share it, so a node that takes the key
  // over resumes from it. Cheap: called after every trial on the lane's thread.
  virtual void trial_recorded() = 0;
  // The lane waits for its GPU (foreign work, the idle policy) and makes no progress: a fleet's
  // claim stops renewing its lease meanwhile, so the key is held at most a lease longer and
  // another node may take it over. resume() renews at once: when another node has the key by
  // then, lost() turns true. Called on the lane's thread; no-ops without a fleet.
  virtual void pause() {}
  virtual void resume() {}

  enum class Verdict {
    published,  // the fleet has it now
    kept,       // the fleet holds this record already, or a better one for the key
    fenced,     // refused: the key was claimed again after this claim (drop the result)
    local,      // not published now (no fleet, or Redis unreachable: published when it returns)
  };
  // Offers the job's winner to the fleet under this claim; called once, before the catalog
  // commits it here.
  virtual Verdict publish(const WinnerRecord& winner) = 0;
};

struct ClaimOutcome {
  enum class Kind { tune, wait, done };
  Kind kind = Kind::tune;
  std::unique_ptr<Claim> claim;       // tune
  std::chrono::milliseconds wait{0};  // wait: ask again after this long
  std::string message;                // wait, done: why (for the job); tune: "" or a note
  int shared_trials = 0;              // tune: trials another node measured, now in the store
};

class WorkClaims {
 public:
  virtual ~WorkClaims() = default;
  // REQUIRES: `job` is running on the calling lane.
  virtual ClaimOutcome acquire(const JobRecord& job) = 0;
};

// No fleet: every key is this node's to tune; publish() says `local`.
WorkClaims& local_claims();
std::unique_ptr<Claim> make_local_claim();

}  // namespace ktune
