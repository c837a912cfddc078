#include "daemon/catalog.h"

#include <chrono>
#include <cmath>
#include <cstdio>

#include "config/log.h"
#include "config/text.h"
#include "templates/space.h"

namespace ktune {

Catalog::Catalog(Store& store, WinnerIndex& index, TemplateSet& templates, const NodeIdentity& node)
    : m_store(store), m_index(index), m_templates(templates), m_node(node) {}

Result<void> Catalog::load() {
  auto winners = scan_winners(m_store);
  if (!winners) return std::unexpected(winners.error());
  m_index.load(std::move(*winners));
  return {};
}

Result<ImportReport> Catalog::import(std::string_view text, std::string_view origin,
                                     Written written) {
  std::lock_guard lock(m_write_mutex);
  const auto templates = m_templates.current();  // one set judges the whole table
  // As commit(): a record this node can serve as exact is never replaced by one it cannot (a
  // faster record measured with another NVRTC or template version), and always replaces one.
  auto replace = [&](const WinnerRecord& stored, const WinnerRecord& incoming) {
    const bool own = m_node.owns(stored.device.id());
    const bool stored_stale = !staleness(stored, own, *templates).empty();
    if (stored_stale != !staleness(incoming, own, *templates).empty()) return stored_stale;
    return prefer_incoming(stored, incoming);
  };
  auto report = import_table(
      m_store, text, origin, [&](const WinnerRecord& r) { return check_record(r, *templates); },
      replace);
  if (!report || !report->applied()) return report;
  const size_t count = report->written.size();
  if (written == Written::returned) {
    m_index.upsert(report->written);
    for (const auto& w : report->written) publish_locked(w);
  } else {
    // Moved, not copied: the copies filled the holes the parsed document left all over the
    // heap, and the trim after the import handed back ~120 MB less (bench/NOTES.md). Listeners
    // are told first (they only queue a copy).
    for (const auto& w : report->written) publish_locked(w);
    m_index.upsert(std::move(report->written));
    report->written.clear();
  }
  // The index serves these records: the store's copy of them in memory is dead weight (~70 MB
  // for 100,000 records, bench/NOTES.md).
  double flush_ms = 0;
  if (count >= k_flush_after_records) {
    const auto t0 = std::chrono::steady_clock::now();
    if (auto flushed = m_store.flush(Table::winners); !flushed)
      log(LogLevel::warn, "store_flush_failed", {{"error", flushed.error().message}});
    flush_ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  }
  log(LogLevel::info, "import",
      {{"source", std::string(origin)},
       {"added", report->added},
       {"replaced", report->replaced},
       {"kept", report->kept},
       {"flush_ms", flush_ms}});
  return report;
}

Result<void> Catalog::check_record(const WinnerRecord& r) const {
  return check_record(r, *m_templates.current());
}

Result<void> Catalog::check_record(const WinnerRecord& r, const TemplateRegistry& templates) const {
  auto bad = [](const std::string& what) { return fail(ErrorCode::invalid_argument, what); };
  const Problem& p = r.problem;
  const auto implementing = templates.for_problem(p, r.device.cc);
  if (implementing.empty()) {
    // Say what is wrong: the op, its dims, or the problem on this device.
    const KernelTemplate* any = nullptr;
    for (const auto& t : templates.all())
      if (t->manifest.op == p.op) {
        any = t.get();
        break;
      }
    if (!any) return bad("problem.op: no installed template implements '" + p.op + "'");
    const std::string want = joined(any->manifest.dims);
    const std::string got = joined(p.dims | std::views::keys);
    if (got != want)
      return bad("problem.dims: " + p.op + " takes dims " + want + ", in that order");
    return bad("problem: no installed template implements " + p.describe() + " on sm_" +
               std::to_string(r.device.cc));
  }
  const DeviceLimits limits = m_node.limits_for(r.device);
  for (size_t i = 0; i < r.ranked.size(); ++i) {
    const RankedConfig& c = r.ranked[i];
    const std::string at = "ranked[" + std::to_string(i) + "]";
    const KernelTemplate* t = templates.find(c.template_name);
    if (!t) return bad(at + ".template: '" + c.template_name + "' is not installed here");
    if (t->manifest.op != p.op)
      return bad(at + ".template: " + c.template_name + " implements " + t->manifest.op + ", not " +
                 p.op);
    if (!t->same_kernel(c.template_hash)) continue;  // another version: served as stale at most
    auto inst = instantiate(*t, p, limits, c.params);
    if (!inst) return bad(at + ".params: " + inst.error().message);
    // Throughput is derived from median_us (the tuner's Instance::tflops_at / gbps_at); a table
    // that says otherwise was edited by hand or made by a tool that got it wrong, and lookups
    // would pass it on. Within 1 %: the table formats keep at least six significant digits.
    // The figure of the other kind (gbps for a FLOP-counted kernel) is never derived: 0.
    auto derived = [&](const char* field, double stated, MetricSpec::Kind kind,
                       double want) -> Result<void> {
      if (stated == 0) return {};
      if (inst->metric_kind != kind)
        return bad(at + "." + field + ": " + t->manifest.name + " counts " +
                   (kind == MetricSpec::Kind::flops ? "bytes" : "FLOPs") + ", so " + field +
                   " must be 0 or absent");
      if (std::abs(stated - want) <= 0.01 * want) return {};
      char why[160];
      std::snprintf(why, sizeof why, ": %.6g is not what median_us %.6g gives (%.6g)", stated,
                    c.median_us, want);
      return bad(at + "." + field + why);
    };
    if (auto ok =
            derived("tflops", c.tflops, MetricSpec::Kind::flops, inst->tflops_at(c.median_us));
        !ok)
      return ok;
    if (auto ok = derived("gbps", c.gbps, MetricSpec::Kind::bytes, inst->gbps_at(c.median_us)); !ok)
      return ok;
  }
  return {};
}

Result<bool> Catalog::commit(const WinnerRecord& record, std::string_view origin) {
  if (auto ok = validate_winner(record); !ok) return std::unexpected(ok.error());
  std::lock_guard lock(m_write_mutex);
  auto stored = get_winner(m_store, record.device, record.problem);
  if (!stored) return std::unexpected(stored.error());
  if (*stored && **stored != record) {
    const bool stored_stale = !staleness(**stored, m_node.owns(record.device.id())).empty();
    if (!stored_stale && !prefer_incoming(**stored, record)) return false;
  }
  if (auto ok = put_winner(m_store, record); !ok) return std::unexpected(ok.error());
  m_index.upsert(record);
  publish_locked(record);
  log(LogLevel::info, "winner_committed",
      {{"key", record.key()},
       {"origin", std::string(origin)},
       {"template", record.ranked.front().template_name},
       {"median_us", record.ranked.front().median_us}});
  return true;
}

bool Catalog::fleet_replaces(const WinnerRecord& stored, const WinnerRecord& incoming,
                             bool news) const {
  const auto templates = m_templates.current();
  const bool own = m_node.owns(stored.device.id());
  const bool stored_ok = servable(stored, own, *templates);
  const bool incoming_ok = servable(incoming, own, *templates);
  if (stored_ok == incoming_ok) return prefer_incoming(stored, incoming);
  return incoming_ok && (news || incoming.timestamp > stored.timestamp);
}

bool Catalog::servable(const WinnerRecord& record, bool own_device) const {
  return servable(record, own_device, *m_templates.current());
}

bool Catalog::servable(const WinnerRecord& record, bool own_device,
                       const TemplateRegistry& templates) const {
  return check_record(record, templates).has_value() &&
         staleness(record, own_device, templates).empty();
}

std::string Catalog::staleness(const WinnerRecord& r, bool own_device) const {
  return staleness(r, own_device, *m_templates.current());
}

std::string Catalog::staleness(const WinnerRecord& r, bool own_device,
                               const TemplateRegistry& templates) const {
  for (const auto& c : r.ranked) {
    const KernelTemplate* t = templates.find(c.template_name);
    if (t && !t->same_kernel(c.template_hash))
      return "template " + c.template_name + " changed since it was measured";
  }
  if (!m_node.nvrtc.empty() && r.validators.nvrtc != m_node.nvrtc)
    return "measured with NVRTC " + r.validators.nvrtc + ", this node has " + m_node.nvrtc;
  if (own_device && m_node.driver != "none" && r.validators.driver != m_node.driver)
    return "measured with driver " + r.validators.driver + ", this node has " + m_node.driver;
  return "";
}

Result<TemplateChanges> Catalog::replace_templates(TemplateRegistry next) {
  if (!next.errors().empty()) {
    std::string why;
    for (const auto& e : next.errors()) why += (why.empty() ? "" : "; ") + e.message;
    return fail(ErrorCode::invalid_argument, why);
  }
  std::lock_guard lock(m_write_mutex);  // no import is judged half by one set, half by the other
  const auto loaded = m_templates.current();
  TemplateChanges changes = compare_templates(*loaded, next);
  // A clean scan also replaces a set loaded with errors (a template skipped at start, now fixed
  // and listed as added, or a directory that came back empty).
  if (changes.empty() && loaded->errors().empty()) return changes;
  // Swap, then move the generation: a lookup that reads the new generation also reads the new
  // templates, so no answer built from the old ones is cached as current (lookups.cc).
  m_templates.replace(std::make_shared<const TemplateRegistry>(std::move(next)));
  m_index.invalidate_answers();
  return changes;
}

void Catalog::on_change(std::function<void(const WinnerRecord&)> listener) {
  std::lock_guard lock(m_write_mutex);
  m_listeners.push_back(std::move(listener));
}

void Catalog::publish_locked(const WinnerRecord& record) {
  for (const auto& l : m_listeners) l(record);
}

}  // namespace ktune
