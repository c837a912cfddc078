#include "daemon/fleet/sync.h"

#include <cmath>
#include <map>
#include <set>

#include "config/log.h"
#include "daemon/fleet/record_codec.h"
#include "store/table_io.h"

namespace ktune {
namespace {

using Clock = std::chrono::steady_clock;
using protocol::Json;

constexpr auto k_retry = std::chrono::milliseconds(500);
constexpr auto k_block = std::chrono::milliseconds(500);  // XREAD BLOCK
constexpr auto k_heartbeat = std::chrono::seconds(1);
constexpr size_t k_outbox_limit = 10'000;  // past it the next resync publishes the rest
constexpr size_t k_merge_batch = 5'000;
constexpr double k_merges_per_s = 10, k_merge_burst = 10;  // merge_slot()'s token bucket

// Set while this thread merges records read from Redis: the catalog's listener must not send
// them back.
thread_local bool t_from_fleet = false;

std::int64_t unix_us() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::int64_t unix_ms() {
  return unix_us() / 1000;
}

double rounded(double v, double step) {
  return std::round(v / step) * step;
}

}  // namespace

struct FleetSync::Outbox {
  struct Item {
    WinnerRecord record;
    std::int64_t us = 0;  // committed here, unix µs
  };
  std::mutex mutex;
  std::condition_variable cv;
  std::vector<Item> items;
  bool overflow = false;
  bool stopping = false;
};

Result<std::unique_ptr<FleetSync>> FleetSync::create(Deps deps) {
  if (deps.config.fleet_redis.empty()) return std::unique_ptr<FleetSync>();
  auto endpoint = parse_redis_endpoint(deps.config.fleet_redis);
  if (!endpoint) return std::unexpected(endpoint.error());
  return std::make_unique<FleetSync>(deps, std::move(*endpoint));
}

namespace {

// The hash's merge rule as this node publishes (Catalog::fleet_replaces).
FleetWinners::Rule fleet_rule(const Catalog& catalog) {
  return [&catalog](const WinnerRecord& stored, const WinnerRecord& incoming, bool news) {
    return catalog.fleet_replaces(stored, incoming, news);
  };
}

}  // namespace

FleetSync::FleetSync(Deps deps, RedisEndpoint endpoint)
    : m_deps(deps),
      m_endpoint(std::move(endpoint)),
      m_layout(deps.config.fleet_namespace),
      m_link({m_endpoint, deps.config.fleet_password,
              std::chrono::milliseconds(deps.config.fleet_timeout_ms), k_retry}),
      m_reader_link({m_endpoint, deps.config.fleet_password,
                     std::chrono::milliseconds(deps.config.fleet_timeout_ms), k_retry}),
      m_winners(m_link, m_layout, deps.node.node_id, fleet_rule(deps.catalog)),
      m_reader_winners(m_reader_link, m_layout, deps.node.node_id, fleet_rule(deps.catalog)),
      m_claims(
          {m_link, m_layout, m_winners, deps.store, deps.catalog, deps.node, m_counters,
           [this](const std::vector<std::string>& v, const std::string& o) { return merge(v, o); },
           std::chrono::milliseconds(deps.config.fleet_lease_ms)}),
      m_pins(m_link, m_reader_link, m_layout, deps.pins, deps.node.node_id),
      m_outbox(std::make_shared<Outbox>()) {}

FleetSync::~FleetSync() {
  stop();
}

void FleetSync::start() {
  m_deps.catalog.on_change([outbox = m_outbox](const WinnerRecord& record) {
    if (t_from_fleet) return;
    std::lock_guard lock(outbox->mutex);
    if (outbox->stopping) return;
    if (outbox->items.size() >= k_outbox_limit) {
      outbox->overflow = true;
      return;
    }
    outbox->items.push_back({record, unix_us()});
    outbox->cv.notify_all();
  });
  m_claims.start();
  m_deps.pins.set_publisher(&m_pins);
  m_reader = std::thread([this] { reader_loop(); });
  m_publisher = std::thread([this] { publisher_loop(); });
  log(LogLevel::info, "fleet_started",
      {{"redis", m_endpoint.describe()},
       {"namespace", m_layout.prefix()},
       {"node", m_deps.node.node_id},
       {"lease_ms", m_deps.config.fleet_lease_ms}});
}

void FleetSync::stop() {
  if (m_stopping.exchange(true)) return;
  {
    std::lock_guard lock(m_outbox->mutex);
    m_outbox->stopping = true;
  }
  m_outbox->cv.notify_all();
  m_wait_cv.notify_all();
  if (m_reader.joinable()) m_reader.join();
  if (m_publisher.joinable()) m_publisher.join();
  m_claims.stop();
  m_deps.pins.set_publisher(nullptr);
}

bool FleetSync::wait_retry(int attempt) {
  std::unique_lock lock(m_wait_mutex);
  m_wait_cv.wait_for(lock, k_retry * (1 << std::min(attempt, 7)),
                     [this] { return m_stopping.load(); });
  return !m_stopping;
}

void FleetSync::set_store_error(const std::string& error) {
  std::lock_guard lock(m_state_mutex);
  m_store_error = error;
}

void FleetSync::set_connected(bool up, const std::string& error) {
  std::lock_guard lock(m_state_mutex);
  if (up == m_connected) {
    if (!up) m_error = error;
    return;
  }
  m_connected = up;
  m_error = error;
  m_since = std::chrono::steady_clock::now();
  if (up) {
    log(LogLevel::info, "fleet_connected", {{"redis", m_endpoint.describe()}});
  } else {
    ++m_counters.disconnects;
    log(LogLevel::warn, "fleet_unreachable",
        {{"redis", m_endpoint.describe()}, {"error", error}, {"serving", "alone"}});
  }
}

// ---- reading: resync, then the events stream ----------------------------------------------

void FleetSync::reader_loop() {
  std::string last_id;
  bool synced = false;
  int resyncs_failed = 0;  // resyncs in a row whose merge the store refused
  while (!m_stopping) {
    if (m_resync.exchange(false) || !synced) {
      auto id = resync();
      if (!id) {
        set_connected(false, id.error().message);
        if (!wait_retry()) break;
        continue;
      }
      last_id = *id;
      synced = true;
      set_connected(true, "");
      if (m_resync_later.exchange(false)) {  // the store refused part of it: again, later
        if (!wait_retry(resyncs_failed++)) break;
        m_resync = true;
      } else {
        resyncs_failed = 0;
        set_store_error("");
      }
    }
    auto r = m_reader_link.command(
        {"XREAD", "COUNT", "1000", "BLOCK", std::to_string(k_block.count()), "STREAMS",
         m_layout.events(), m_layout.pin_events(), last_id, m_pin_last_id},
        std::chrono::milliseconds(m_deps.config.fleet_timeout_ms) + k_block);
    if (!r) {
      synced = false;  // whatever was published meanwhile comes with the next resync
      set_connected(false, r.error().message);
      if (!wait_retry()) break;
      continue;
    }
    if (r->is_nil()) continue;
    Batch batch;
    batch.last_id = last_id;
    collect(*r, batch);
    last_id = batch.last_id;
    if (!batch.last_pin_id.empty()) m_pin_last_id = batch.last_pin_id;
    for (const auto& event : batch.pin_events) m_pins.apply(event);  // rare: no token bucket
    if (const auto slot = merge_slot(); !batch.values.empty() && Clock::now() < slot) {
      {  // a burst: wait for the next merge slot and take what arrived meanwhile too
        std::unique_lock lock(m_wait_mutex);
        m_wait_cv.wait_until(lock, slot, [this] { return m_stopping.load(); });
      }
      auto more =
          m_reader_link.command({"XREAD", "COUNT", "1000", "STREAMS", m_layout.events(), last_id});
      if (more && !more->is_nil()) collect(*more, batch);
      last_id = batch.last_id;
    }
    // The store refused the merge (a full disk): the same events again, later, backing off;
    // Redis is fine, so nothing says otherwise (status shows the store's error meanwhile).
    auto merged = apply(batch);
    for (int attempt = 0; !merged; ++attempt) {
      set_store_error(merged.error().message);
      if (!wait_retry(attempt)) return;
      merged = merge(batch.values, "fleet", Keys::may_repeat);
    }
    set_store_error("");
  }
}

Result<std::string> FleetSync::resync() {
  auto last = m_reader_link.command({"XREVRANGE", m_layout.events(), "+", "-", "COUNT", "1"});
  if (!last) return std::unexpected(last.error());
  const std::string from = last->elements.empty() ? "0-0" : last->at(0).at(0).str;
  auto pin_from = m_pins.last_event_id();
  if (!pin_from) return std::unexpected(pin_from.error());
  if (auto ok = m_pins.resync(); !ok) return std::unexpected(ok.error());
  m_pin_last_id = *pin_from;
  auto devices = m_reader_winners.device_ids();
  if (!devices) return std::unexpected(devices.error());
  std::set<std::string> all(devices->begin(), devices->end());
  for (const auto& d : m_deps.catalog.index().device_ids()) all.insert(d);
  size_t pulled = 0, pushed = 0;
  for (const auto& device : all) {
    auto fleet = m_reader_winners.read_all(device);
    if (!fleet) return std::unexpected(fleet.error());
    std::vector<std::string> values;
    for (const auto& [_, v] : *fleet) values.push_back(v);
    if (auto merged = merge(values, "fleet"); !merged) {
      set_store_error(merged.error().message);
      m_resync_later = true;
    }
    pulled += values.size();
    auto n = push_local(device, *fleet);
    if (!n) return std::unexpected(n.error());
    pushed += *n;
  }
  ++m_counters.resyncs;
  log(LogLevel::info, "fleet_resync",
      {{"device_classes", all.size()}, {"pulled", pulled}, {"pushed", pushed}});
  return from;
}

Result<size_t> FleetSync::push_local(
    const std::string& device, const std::vector<std::pair<std::string, std::string>>& fleet) {
  std::vector<std::string> values;
  for (const auto& [_, v] : fleet)
    if (well_formed_value(v)) values.push_back(v);
  std::vector<ImportRejection> rejected;
  auto parsed = parse_table(table_of_values(values), "fleet", rejected);
  std::map<std::string, WinnerRecord> theirs;
  if (parsed)
    for (auto& r : *parsed) theirs.emplace(r.problem.key(), std::move(r));
  auto local = scan_winners(m_deps.store, device);
  if (!local) return std::unexpected(local.error());
  size_t pushed = 0;
  const bool own = m_deps.node.owns(device);
  for (const auto& mine : *local) {
    auto it = theirs.find(mine.problem.key());
    if (it != theirs.end() && it->second == mine) continue;
    // Another GPU class's record: this node does not judge it by that class's driver, so it fills
    // only what the hash lacks (republishing the faster record of an older driver would move the
    // hash back at every resync, and that class's upgraded nodes would tune the key again).
    if (it != theirs.end() && !own) continue;
    // time 0: not a fresh commit (receivers leave it out of the propagation figures).
    auto r = m_reader_winners.publish(mine, "", 0);
    if (!r) return std::unexpected(r.error());
    if (*r == FleetWinners::Published::written) ++pushed, ++m_counters.published;
  }
  return pushed;
}

void FleetSync::collect(const RedisReply& streams, Batch& batch) const {
  const std::string& self = m_deps.node.node_id;
  for (const auto& stream : streams.elements) {
    const bool pins = stream.at(0).str == m_layout.pin_events();
    for (const auto& entry : stream.at(1).elements) {
      (pins ? batch.last_pin_id : batch.last_id) = entry.at(0).str;
      std::map<std::string, std::string> f;
      const auto& kv = entry.at(1).elements;
      for (size_t i = 0; i + 1 < kv.size(); i += 2) f[kv[i].str] = kv[i + 1].str;
      if (pins) {
        batch.pin_events.push_back(std::move(f));
        continue;
      }
      if (f["node"] == self) continue;  // our own publication
      batch.values.push_back(f["value"]);
      batch.sent_us.push_back(std::atoll(f["us"].c_str()));
    }
  }
}

Clock::time_point FleetSync::merge_slot() {
  const auto now = Clock::now();
  const double elapsed = std::chrono::duration<double>(now - m_tokens_at).count();
  m_merge_tokens = std::min(k_merge_burst, m_merge_tokens + elapsed * k_merges_per_s);
  m_tokens_at = now;
  if (m_merge_tokens >= 1) return now;
  return now + std::chrono::duration_cast<Clock::duration>(
                   std::chrono::duration<double>((1 - m_merge_tokens) / k_merges_per_s));
}

Result<void> FleetSync::apply(Batch& batch) {
  if (batch.values.empty()) return {};
  m_counters.received += batch.values.size();
  merge_slot();         // refills the bucket up to now
  m_merge_tokens -= 1;  // may go below 0 by less than one token: merge_slot() waits it out
  auto merged = merge(batch.values, "fleet", Keys::may_repeat);
  const std::int64_t now = unix_us();
  for (std::int64_t us : batch.sent_us)
    if (us > 0) m_counters.record_delay(double(now - us) / 1000);
  return merged;
}

Result<void> FleetSync::merge(const std::vector<std::string>& values, const std::string& origin,
                              Keys keys) {
  // The last value of each key, in the order read (import refuses two records of one key, which
  // would have dropped the later one, the one Redis holds now, as a bad record).
  std::vector<std::string> ok;
  std::map<std::string, size_t> last_of_key;  // key -> index in ok
  for (const auto& v : values) {
    if (!well_formed_value(v)) {
      ++m_counters.rejected;
      continue;
    }
    if (keys == Keys::unique) {
      ok.push_back(v);
      continue;
    }
    auto record = parse_winner_value(v);  // one that does not parse is import's to refuse
    if (record) {
      auto [it, first] = last_of_key.try_emplace(record->key(), ok.size());
      if (!first) {
        ok[it->second] = v;  // superseded in Redis by this one
        continue;
      }
    }
    ok.push_back(v);
  }
  Result<void> result;
  for (size_t begin = 0; begin < ok.size(); begin += k_merge_batch) {
    std::vector<std::string> batch(ok.begin() + long(begin),
                                   ok.begin() + long(std::min(ok.size(), begin + k_merge_batch)));
    t_from_fleet = true;
    auto report = m_deps.catalog.import(table_of_values(batch), origin);
    if (report && !report->applied()) {  // import is all or nothing: retry without the bad ones
      std::set<size_t> bad;
      for (const auto& r : report->rejected) {
        bad.insert(r.index);
        if (bad.size() <= 3)
          log(LogLevel::warn, "fleet_record_rejected", {{"key", r.key}, {"reason", r.reason}});
      }
      m_counters.rejected += bad.size();
      std::vector<std::string> rest;
      for (size_t i = 0; i < batch.size(); ++i)
        if (!bad.count(i)) rest.push_back(batch[i]);
      report = m_deps.catalog.import(table_of_values(rest), origin);
    }
    t_from_fleet = false;
    if (!report) {
      log(LogLevel::error, "fleet_merge_failed", {{"error", report.error().message}});
      result = std::unexpected(report.error());
      continue;
    }
    m_counters.merged += report->written.size();
    for (const auto& w : report->written) {
      if (!m_deps.catalog.staleness(w, m_deps.node.owns(w.device.id())).empty()) continue;
      if (m_deps.jobs.complete_queued(w.device, w.problem,
                                      "tuned by node " + w.node_id + " (from the fleet)"))
        ++m_counters.claims_done;
    }
  }
  return result;
}

// ---- publishing: committed winners and heartbeats -------------------------------------------

void FleetSync::publisher_loop() {
  auto next_beat = std::chrono::steady_clock::now();
  while (true) {
    std::vector<Outbox::Item> items;
    {
      std::unique_lock lock(m_outbox->mutex);
      m_outbox->cv.wait_until(lock, next_beat,
                              [&] { return m_outbox->stopping || !m_outbox->items.empty(); });
      if (m_outbox->stopping) break;
      items.swap(m_outbox->items);
      if (std::exchange(m_outbox->overflow, false)) m_resync = true;
    }
    for (const auto& item : items) {
      auto r = m_winners.publish(item.record, "", item.us);
      if (!r) {  // Redis is gone: the resync after it returns publishes these
        m_resync = true;
        break;
      }
      if (*r == FleetWinners::Published::written) ++m_counters.published;
    }
    if (std::chrono::steady_clock::now() >= next_beat) {
      heartbeat(false);
      next_beat = std::chrono::steady_clock::now() + k_heartbeat;
    }
  }
  heartbeat(true);
}

void FleetSync::heartbeat(bool stopped) {
  const auto d = m_counters.delays();
  const Json beat = {{"ms", unix_ms()},
                     {"version", KTUNE_VERSION},
                     {"stopped", stopped},
                     {"winners", m_deps.catalog.index().size()},
                     {"tuned", m_counters.tuned.load()},
                     {"published", m_counters.published.load()},
                     {"merged", m_counters.merged.load()},
                     {"claims", m_claims.held().size()},
                     {"lag_p50_ms", d.p50},
                     {"lag_p99_ms", d.p99}};
  (void)m_link.command({"HSET", m_layout.nodes(), m_deps.node.node_id, beat.dump()});
}

// ---- reporting -------------------------------------------------------------------------------

Json FleetSync::summary() const {
  bool connected;
  std::string error, store_error;
  double for_s;
  {
    std::lock_guard lock(m_state_mutex);
    connected = m_connected;
    error = m_error;
    store_error = m_store_error;
    for_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - m_since).count();
  }
  const auto d = m_counters.delays();
  const auto& c = m_counters;
  return Json{{"enabled", true},
              {"redis", m_endpoint.describe()},
              {"namespace", m_layout.prefix()},
              {"node", m_deps.node.node_id},
              {"connected", connected},
              {"error", error},
              {"store_error", store_error},
              {connected ? "connected_for_s" : "unreachable_for_s", rounded(for_s, 0.1)},
              {"lease_ms", m_deps.config.fleet_lease_ms},
              {"tuned", c.tuned.load()},
              {"published", c.published.load()},
              {"received", c.received.load()},
              {"merged", c.merged.load()},
              {"rejected", c.rejected.load()},
              {"fenced", c.fenced.load()},
              {"claims_held", m_claims.held()},
              {"claims",
               {{"acquired", c.claims_acquired.load()},
                {"waited", c.claims_waited.load()},
                {"done_by_fleet", c.claims_done.load()},
                {"alone", c.claims_alone.load()},
                {"lost", c.leases_lost.load()}}},
              {"trials", {{"shared", c.trials_shared.load()}, {"taken", c.trials_taken.load()}}},
              {"resyncs", c.resyncs.load()},
              {"pins_received", m_pins.received()},
              {"disconnects", c.disconnects.load()},
              {"lag_ms",
               {{"p50", rounded(d.p50, 0.1)},
                {"p99", rounded(d.p99, 0.1)},
                {"max", rounded(d.max, 0.1)},
                {"last", rounded(d.last, 0.1)},
                {"count", d.count}}}};
}

Json FleetSync::report() {
  Json j = summary();
  auto nodes = m_link.command({"HGETALL", m_layout.nodes()});
  auto devices = m_winners.device_ids();
  if (!nodes || !devices) {
    j["fleet_error"] = (!nodes ? nodes.error() : devices.error()).message;
    return j;
  }
  const std::int64_t now = unix_ms();
  Json list = Json::array();
  std::uint64_t claims = 0;
  for (size_t i = 0; i + 1 < nodes->elements.size(); i += 2) {
    Json beat = Json::parse(nodes->elements[i + 1].str, nullptr, false);
    if (!beat.is_object()) continue;
    beat["name"] = nodes->elements[i].str;
    beat["seen_s_ago"] = rounded(double(now - beat.value("ms", std::int64_t(0))) / 1000, 0.1);
    if (!beat.value("stopped", false)) claims += beat.value("claims", std::uint64_t(0));
    list.push_back(std::move(beat));
  }
  Json keys = Json::array();
  std::uint64_t total = 0;
  for (const auto& d : *devices) {
    auto n = m_link.command({"HLEN", m_layout.winners(d)});
    if (!n) continue;
    keys.push_back({{"device", d}, {"winners", n->integer}});
    total += std::uint64_t(n->integer);
  }
  j["nodes"] = list;
  j["keys_tuned"] = total;
  j["device_classes"] = keys;
  j["fleet_claims_held"] = claims;
  return j;
}

std::string FleetSync::metrics_text() const {
  std::string s;
  auto metric = [&](const char* name, const char* type, const char* help, double value) {
    s += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " " + type + "\n" +
         name + " " + std::to_string(value) + "\n";
  };
  const auto& c = m_counters;
  bool connected;
  {
    std::lock_guard lock(m_state_mutex);
    connected = m_connected;
  }
  metric("ktune_fleet_connected", "gauge", "Whether the fleet's Redis answers (1) or not (0).",
         connected ? 1 : 0);
  metric("ktune_fleet_published_total", "counter", "Winners this node wrote to the fleet.",
         double(c.published));
  metric("ktune_fleet_received_total", "counter", "Winners of other nodes read here.",
         double(c.received));
  metric("ktune_fleet_merged_total", "counter", "Fleet winners that changed this node's table.",
         double(c.merged));
  metric("ktune_fleet_rejected_total", "counter", "Fleet values the import path refused.",
         double(c.rejected));
  metric("ktune_fleet_tuned_total", "counter", "Jobs this node tuned to a winner.",
         double(c.tuned));
  metric("ktune_fleet_fenced_total", "counter",
         "Results dropped because the key was claimed again.", double(c.fenced));
  s += "# HELP ktune_fleet_claims_total Claims asked before tuning, by result.\n"
       "# TYPE ktune_fleet_claims_total counter\n";
  for (const auto& [result, n] :
       {std::pair{"acquired", &c.claims_acquired}, std::pair{"waited", &c.claims_waited},
        std::pair{"done_by_fleet", &c.claims_done}, std::pair{"alone", &c.claims_alone},
        std::pair{"lost", &c.leases_lost}})
    s += std::string("ktune_fleet_claims_total{result=\"") + result + "\"} " +
         std::to_string(n->load()) + "\n";
  metric("ktune_fleet_claims_held", "gauge", "Keys this node holds a lease on.",
         double(m_claims.held().size()));
  metric("ktune_fleet_resyncs_total", "counter", "Full reads of the fleet's table.",
         double(c.resyncs));
  metric("ktune_fleet_disconnects_total", "counter", "Times Redis became unreachable.",
         double(c.disconnects));
  const auto d = c.delays();
  s += "# HELP ktune_fleet_propagation_seconds Commit on another node to merge here (last 1024).\n"
       "# TYPE ktune_fleet_propagation_seconds summary\n"
       "ktune_fleet_propagation_seconds{quantile=\"0.5\"} " +
       std::to_string(d.p50 / 1000) +
       "\n"
       "ktune_fleet_propagation_seconds{quantile=\"0.99\"} " +
       std::to_string(d.p99 / 1000) + "\nktune_fleet_propagation_seconds_count " +
       std::to_string(d.count) + "\n";
  return s;
}

}  // namespace ktune
