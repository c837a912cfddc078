#include "daemon/fleet/claims.h"

#include <chrono>
#include <cstdio>
#include <random>
#include <set>

#include "config/log.h"
#include "daemon/fleet/record_codec.h"

namespace ktune {
namespace {

// KEYS: lease, fence, fence_seq, winners hash, trials. ARGV: node, nonce, lease ms, field,
// fence ttl ms, check the winners hash first ("1"). A lease of this node's own (a previous run
// that died) is taken over at once. Replies {"tuned", winner}, {"held", lease, pttl} or
// {"acquired", token, previous fence, shared trials}.
constexpr const char* k_claim_script = R"lua(
if ARGV[6] == '1' then
  local w = redis.call('HGET', KEYS[4], ARGV[4])
  if w then return {'tuned', w} end
end
local cur = redis.call('GET', KEYS[1])
if cur and string.sub(cur, 1, string.len(ARGV[1]) + 1) ~= ARGV[1] .. ' ' then
  return {'held', cur, redis.call('PTTL', KEYS[1])}
end
local prev = redis.call('GET', KEYS[2])
local token = redis.call('INCR', KEYS[3]) .. '.' .. ARGV[2]
redis.call('SET', KEYS[1], ARGV[1] .. ' ' .. token, 'PX', ARGV[3])
redis.call('SET', KEYS[2], token, 'PX', ARGV[5])
return {'acquired', token, prev or '', redis.call('HLEN', KEYS[5])}
)lua";

// KEYS: lease. ARGV: "<node> <token>", lease ms. 1 when renewed, 0 when the lease is not ours.
constexpr const char* k_renew_script = R"lua(
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
return 0
)lua";

// KEYS: lease. ARGV: "<node> <token>". Deletes the lease only if it is still ours.
constexpr const char* k_release_script = R"lua(
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
)lua";

std::int64_t unix_us() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string nonce() {
  static std::mutex mutex;
  static std::mt19937_64 rng(std::random_device{}());
  std::lock_guard lock(mutex);
  char buf[24];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(rng()));
  return buf;
}

// Redis unreachable when the job started: this node tunes the key alone.
class AloneClaim final : public Claim {
 public:
  explicit AloneClaim(FleetCounters& counters) : m_counters(counters) {}
  bool lost() const override { return false; }
  void trial_recorded() override {}
  Verdict publish(const WinnerRecord&) override {
    ++m_counters.tuned;
    return Verdict::local;  // the catalog's listener (or the catch-up) publishes it
  }

 private:
  FleetCounters& m_counters;
};

}  // namespace

struct FleetClaims::State {
  std::string key, device, field;
  std::mutex mutex;   // serializes renew, publish and release of this key
  std::string token;  // guarded by mutex; changes when a renewal re-takes the lease
  std::atomic<bool> released{false};
  std::atomic<bool> lost{false};
  std::atomic<bool> dirty{false};  // trials recorded since the last share
  std::atomic<bool> paused{false};  // the lane waits for its GPU: the lease is not renewed
  bool published = false;           // guarded by mutex: the winner went out, trials:K is done
  std::set<std::string> shared;     // guarded by mutex: trial fields in trials:K from this holder
};

class FleetClaims::Held final : public Claim {
 public:
  Held(FleetClaims& owner, std::shared_ptr<State> state)
      : m_owner(owner), m_state(std::move(state)) {}
  ~Held() override { m_owner.release(*m_state); }

  bool lost() const override { return m_state->lost; }
  void pause() override { m_state->paused = true; }
  void resume() override {
    m_state->paused = false;
    m_owner.renew(*m_state);  // now, not a third of a lease later: lost() before the next trial
  }
  void trial_recorded() override {
    m_state->dirty = true;
    std::lock_guard lock(m_owner.m_mutex);
    m_owner.m_wake = true;
    m_owner.m_cv.notify_all();
  }
  Verdict publish(const WinnerRecord& winner) override {
    FleetCounters& counters = m_owner.m_deps.counters;
    ++counters.tuned;
    std::lock_guard lock(m_state->mutex);
    auto r = m_owner.m_deps.winners.publish(winner, m_state->token, unix_us());
    if (r && *r == FleetWinners::Published::unfenced) {
      // Redis lost the key's fence (restarted empty, a failover) before a renewal could put it
      // back: nobody else claimed the key, so take it again and publish under the new fence.
      TakeResult t = m_owner.take(m_state->device, m_state->field, true);
      if (t.take == Take::acquired) {
        ++counters.claims_acquired;
        log(LogLevel::info, "fleet_lease_retaken", {{"key", m_state->key}, {"token", t.token}});
        m_state->token = t.token;
        r = m_owner.m_deps.winners.publish(winner, m_state->token, unix_us());
      } else if (t.take == Take::held) {
        r = FleetWinners::Published::fenced;  // another node claimed it meanwhile: it stands
      } else if (t.take == Take::error) {
        r = std::unexpected(t.error);  // committed here; the catch-up publishes it
      }
    }
    if (!r) {
      log(LogLevel::warn, "fleet_publish_deferred",
          {{"key", m_state->key}, {"error", r.error().message}});
      return Verdict::local;
    }
    switch (*r) {
      case FleetWinners::Published::written:
        ++counters.published;
        m_state->published = true;  // the script deleted trials:K: share nothing after it
        return Verdict::published;
      case FleetWinners::Published::kept:
        m_state->published = true;
        return Verdict::kept;
      case FleetWinners::Published::unfenced:  // still no fence after taking it again
      case FleetWinners::Published::fenced:
        ++counters.fenced;
        log(LogLevel::warn, "fleet_result_fenced",
            {{"key", m_state->key}, {"token", m_state->token}});
        return Verdict::fenced;
    }
    return Verdict::local;
  }

 private:
  FleetClaims& m_owner;
  std::shared_ptr<State> m_state;
};

FleetClaims::FleetClaims(Deps deps) : m_deps(std::move(deps)) {}

FleetClaims::~FleetClaims() {
  stop();
}

void FleetClaims::start() {
  if (m_renewer.joinable()) return;
  {
    std::lock_guard lock(m_mutex);
    m_stopping = false;
  }
  m_renewer = std::thread([this] { renew_loop(); });
}

void FleetClaims::stop() {
  {
    std::lock_guard lock(m_mutex);
    m_stopping = true;
  }
  m_cv.notify_all();
  if (m_renewer.joinable()) m_renewer.join();
}

std::vector<std::string> FleetClaims::held() const {
  std::lock_guard lock(m_mutex);
  std::vector<std::string> out;
  for (const auto& s : m_held) out.push_back(s->key);
  return out;
}

FleetClaims::TakeResult FleetClaims::take(const std::string& device, const std::string& field,
                                          bool skip_winner) {
  const std::string key = device + "/" + field;
  auto r = m_deps.link.command(
      {"EVAL", k_claim_script, "5", m_deps.layout.lease(key), m_deps.layout.fence(key),
       m_deps.layout.fence_seq(), m_deps.layout.winners(device), m_deps.layout.trials(key),
       m_deps.node.node_id, nonce(), std::to_string(m_deps.lease.count()), field,
       std::to_string(k_fleet_fence_ttl_ms), skip_winner ? "0" : "1"});
  TakeResult out;
  if (!r) {
    out.error = r.error();
    return out;
  }
  const std::string& verdict = r->at(0).str;
  if (verdict == "tuned") {
    out.take = Take::tuned;
    out.winner = r->at(1).str;
  } else if (verdict == "held") {
    out.take = Take::held;
    out.holder = r->at(1).str.substr(0, r->at(1).str.rfind(' '));
    out.pttl = r->at(2).integer;
  } else if (verdict == "acquired") {
    out.take = Take::acquired;
    out.token = r->at(1).str;
    out.previous = r->at(2).str;
    out.shared = r->at(3).integer;
  } else {
    out.error = Error{ErrorCode::internal, "claim script replied '" + verdict + "'"};
  }
  return out;
}

ClaimOutcome FleetClaims::acquire(const JobRecord& job) {
  const std::string device = job.device.id(), field = job.problem.key();
  const std::string key = device + "/" + field;
  ClaimOutcome out;
  for (bool skip_winner : {false, true}) {
    TakeResult t = take(device, field, skip_winner);
    switch (t.take) {
      case Take::error:
        ++m_deps.counters.claims_alone;
        log(LogLevel::warn, "fleet_claim_unavailable", {{"key", key}, {"error", t.error.message}});
        out.claim = std::make_unique<AloneClaim>(m_deps.counters);
        out.message = "Redis unreachable: tuned without a claim";
        return out;
      case Take::tuned: {
        auto record = usable_here(t.winner, device);
        if (!record) continue;  // this node tunes it again
        if (auto merged = m_deps.merge({t.winner}, "fleet"); !merged) {
          out.kind = ClaimOutcome::Kind::wait;  // the store failed: ask again a lease later
          out.wait = m_deps.lease;
          out.message = "the fleet's winner could not be merged here: " + merged.error().message;
          return out;
        }
        ++m_deps.counters.claims_done;
        out.kind = ClaimOutcome::Kind::done;
        out.message = "tuned by node " + record->node_id + " (the fleet's winner, merged here)";
        return out;
      }
      case Take::held: {
        ++m_deps.counters.claims_waited;
        const auto left = std::chrono::milliseconds(std::max<long long>(t.pttl, 0));
        out.kind = ClaimOutcome::Kind::wait;
        out.wait = std::min(left, m_deps.lease) + std::chrono::milliseconds(50);
        out.message = "waiting: node " + t.holder + " is tuning this key (its lease ends in " +
                      std::to_string(left.count()) + " ms)";
        return out;
      }
      case Take::acquired: {
        ++m_deps.counters.claims_acquired;
        auto state = std::make_shared<State>();
        state->key = key;
        state->device = device;
        state->field = field;
        state->token = t.token;
        {
          std::lock_guard lock(m_mutex);
          m_held.push_back(state);
        }
        if (!t.previous.empty() && t.shared > 0) out.shared_trials = take_trials(key);
        out.claim = std::make_unique<Held>(*this, std::move(state));
        return out;
      }
    }
  }
  return out;  // unreachable: the second pass never sees a winner
}

std::optional<WinnerRecord> FleetClaims::usable_here(const std::string& value,
                                                     const std::string& device) const {
  auto record = parse_winner_value(value);
  if (!record || !m_deps.catalog.servable(*record, m_deps.node.owns(device)))
    return std::nullopt;  // unreadable, not servable (a template not installed here), stale here
  return std::move(*record);
}

int FleetClaims::take_trials(const std::string& key) {
  auto r = m_deps.link.command({"HGETALL", m_deps.layout.trials(key)});
  if (!r) return 0;
  WriteBatch batch;
  int n = 0;
  for (size_t i = 0; i + 1 < r->elements.size(); i += 2) {
    auto trial = decode_trial(r->elements[i + 1].str);
    if (!trial || trial->outcome == Outcome::in_flight || !trial->plausible() ||
        !trial->key().starts_with(key + "/"))
      continue;
    add_trial(batch, *trial);
    ++n;
  }
  if (n == 0 || !m_deps.store.write(batch, Durability::buffered)) return 0;
  m_deps.counters.trials_taken += std::uint64_t(n);
  return n;
}

void FleetClaims::renew_loop() {
  const auto period = std::max(m_deps.lease / 3, std::chrono::milliseconds(10));
  auto next_renew = std::chrono::steady_clock::now() + period;
  std::unique_lock lock(m_mutex);
  while (!m_stopping) {
    m_cv.wait_until(lock, next_renew, [this] { return m_stopping || m_wake; });
    if (m_stopping) break;
    m_wake = false;
    const auto held = m_held;
    lock.unlock();
    const bool due = std::chrono::steady_clock::now() >= next_renew;
    for (const auto& s : held) {
      share_trials(*s);
      if (due) renew(*s);
    }
    if (due) next_renew = std::chrono::steady_clock::now() + period;
    lock.lock();
  }
}

void FleetClaims::renew(State& s) {
  std::lock_guard lock(s.mutex);
  if (s.released || s.lost || s.paused) return;
  auto r = m_deps.link.command({"EVAL", k_renew_script, "1", m_deps.layout.lease(s.key),
                                m_deps.node.node_id + " " + s.token,
                                std::to_string(m_deps.lease.count())});
  if (!r || r->integer == 1) return;  // renewed, or Redis unreachable (keep tuning)
  // The lease is gone (it ran out during a pause, or Redis lost it): take it again if the key is
  // free, unless another node finished it meanwhile (then the claim is lost: the job waits, and
  // its next acquire merges that winner).
  TakeResult t = take(s.device, s.field, false);
  if (t.take == Take::tuned) {
    if (usable_here(t.winner, s.device)) {
      s.lost = true;
      ++m_deps.counters.leases_lost;
      log(LogLevel::warn, "fleet_lease_lost", {{"key", s.key}, {"holder", "(tuned elsewhere)"}});
      return;
    }
    t = take(s.device, s.field, true);  // the fleet's winner is of no use here: tune on
  }
  if (t.take == Take::acquired) {
    log(LogLevel::info, "fleet_lease_retaken", {{"key", s.key}, {"token", t.token}});
    s.token = t.token;
    // Redis may have lost trials:K with the lease (restarted empty, a failover to a replica
    // behind it): share every trial again, or a node taking the key after this one would
    // measure them again. (Rewriting fields that are there costs one HSET.)
    s.shared.clear();
    s.dirty = true;
  } else if (t.take == Take::held) {
    s.lost = true;
    ++m_deps.counters.leases_lost;
    log(LogLevel::warn, "fleet_lease_lost", {{"key", s.key}, {"holder", t.holder}});
  }
}

void FleetClaims::share_trials(State& s) {
  // Under the key's mutex, as publish: a share racing the final publish could write trials:K
  // again after the script deleted it.
  std::lock_guard lock(s.mutex);
  if (s.released || s.published || !s.dirty.exchange(false)) return;
  auto trials = scan_trials(m_deps.store, s.key + "/");
  if (!trials) return;
  std::vector<std::string> cmd = {"HSET", m_deps.layout.trials(s.key)};
  std::vector<std::string> fields;
  for (const auto& t : *trials) {
    if (t.outcome == Outcome::in_flight || !t.plausible()) continue;
    std::string field = t.key().substr(s.key.size() + 1);
    if (s.shared.count(field)) continue;
    cmd.push_back(field);
    cmd.push_back(encode(t));
    fields.push_back(std::move(field));
  }
  if (fields.empty()) return;
  auto r = m_deps.link.command(cmd);
  if (r)
    r = m_deps.link.command(
        {"PEXPIRE", m_deps.layout.trials(s.key), std::to_string(k_fleet_trials_ttl_ms)});
  if (!r) {
    s.dirty = true;  // share them with the next renewal
    return;
  }
  s.shared.insert(fields.begin(), fields.end());
  m_deps.counters.trials_shared += fields.size();
}

void FleetClaims::release(State& s) {
  {
    std::lock_guard lock(m_mutex);
    std::erase_if(m_held, [&](const auto& p) { return p.get() == &s; });
  }
  std::lock_guard lock(s.mutex);
  s.released = true;
  if (s.lost) return;
  (void)m_deps.link.command({"EVAL", k_release_script, "1", m_deps.layout.lease(s.key),
                             m_deps.node.node_id + " " + s.token});
}

}  // namespace ktune
