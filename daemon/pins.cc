#include "daemon/pins.h"

#include <chrono>
#include <cstdio>
#include <random>

#include "config/log.h"
#include "config/text.h"

namespace ktune {
namespace {

std::string new_pin_id(const std::string& node) {
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                      std::chrono::system_clock::now().time_since_epoch())
                      .count();
  std::random_device random;
  char hex[9];
  std::snprintf(hex, sizeof hex, "%08x", unsigned(random()));
  return node + "." + std::to_string(ms) + "." + hex;
}

}  // namespace

PinTable::PinTable(Store& store, WinnerIndex& live, const NodeIdentity& node)
    : m_store(store), m_live(live), m_node(node) {}

std::shared_ptr<const PinTable::Pin> PinTable::build(PinRecord record) {
  auto pin = std::make_shared<Pin>();
  pin->info = std::move(record.info);
  pin->info.count = record.winners.size();
  pin->index.load(std::move(record.winners));
  return pin;
}

PinRecord PinTable::record(const Pin& pin) {
  PinRecord r;
  r.info = pin.info;
  for (const auto& w : pin.index.all()) r.winners.push_back(*w);
  return r;
}

void PinTable::put_locked(std::shared_ptr<const Pin> pin) {
  std::unique_lock lock(m_mutex);
  m_pins[pin->info.name] = std::move(pin);
  // Cached answers of a pin of this name (or none) are stale now. Invalidated before the lock is
  // released: a lookup that sees the new pin table must not be served an answer from the old one.
  // Lock order: this table's mutex, then the index's (the index never calls back here).
  m_live.invalidate_answers();
}

void PinTable::erase_locked(const std::string& name) {
  std::unique_lock lock(m_mutex);
  m_pins.erase(name);
  m_live.invalidate_answers();  // under the lock, as in put_locked
}

Result<void> PinTable::load() {
  std::vector<std::string> unreadable;
  auto pins = scan_pins(m_store, unreadable);
  if (!pins) return std::unexpected(pins.error());
  for (const auto& why : unreadable)
    log(LogLevel::error, "pin_unreadable",
        {{"pin", why}, {"action", "skipped; delete and pin again"}});
  std::lock_guard write(m_write_mutex);
  for (auto& p : *pins) put_locked(build(std::move(p)));
  return {};
}

Result<PinInfo> PinTable::create(const std::string& name, const Filter& filter) {
  if (auto ok = validate_pin_name(name); !ok) return std::unexpected(ok.error());
  std::lock_guard write(m_write_mutex);
  {
    std::shared_lock lock(m_mutex);
    if (auto it = m_pins.find(name); it != m_pins.end())
      return fail(ErrorCode::already_exists,
                  "pin '" + name + "' exists (created by " + it->second->info.node +
                      "); pins are immutable: delete it first to pin again under this name");
    if (m_pins.size() >= k_max_pins)
      return fail(ErrorCode::invalid_argument, "this node holds " + std::to_string(m_pins.size()) +
                                                   " pins, the most it keeps (" +
                                                   std::to_string(k_max_pins) +
                                                   "); delete one first");
  }
  PinRecord pin;
  pin.info = {name,
              new_pin_id(m_node.node_id),
              m_node.node_id,
              std::chrono::duration_cast<std::chrono::seconds>(
                  std::chrono::system_clock::now().time_since_epoch())
                  .count(),
              filter.device,
              filter.op,
              0};
  for (const auto& r : m_live.all()) {  // one consistent view of the live table
    if (!filter.device.empty() && r->device.id() != filter.device) continue;
    if (!filter.op.empty() && r->problem.op != filter.op) continue;
    if (pin.winners.size() == k_max_pin_records)
      return fail(ErrorCode::invalid_argument,
                  "more than " + std::to_string(k_max_pin_records) +
                      " winners match; pin one device class (--device) or one op (--op)");
    pin.winners.push_back(*r);
  }
  if (pin.winners.empty())
    return fail(ErrorCode::not_found,
                "no winner matches" +
                    (filter.device.empty() ? std::string() : " device " + filter.device) +
                    (filter.op.empty() ? std::string() : " op " + filter.op) +
                    ": nothing to pin (tune or import first)");
  pin.info.count = pin.winners.size();
  if (m_publisher)
    if (auto ok = m_publisher->publish_pin(pin); !ok) return std::unexpected(ok.error());
  if (auto ok = put_pin(m_store, pin); !ok) return std::unexpected(ok.error());
  PinInfo info = pin.info;
  put_locked(build(std::move(pin)));
  log(LogLevel::info, "pin_created",
      {{"pin", info.name},
       {"id", info.id},
       {"records", info.count},
       {"device", info.device},
       {"op", info.op}});
  return info;
}

Result<PinInfo> PinTable::remove(const std::string& name) {
  std::lock_guard write(m_write_mutex);
  std::shared_ptr<const Pin> pin = find(name);
  if (!pin) return fail(ErrorCode::not_found, "no pin '" + name + "' (pins: " + names() + ")");
  if (m_publisher)
    if (auto ok = m_publisher->withdraw_pin(pin->info); !ok) return std::unexpected(ok.error());
  if (auto ok = delete_pin(m_store, name); !ok) return std::unexpected(ok.error());
  erase_locked(name);
  log(LogLevel::info, "pin_deleted", {{"pin", name}, {"id", pin->info.id}});
  return pin->info;
}

Result<bool> PinTable::install(PinRecord record) {
  std::lock_guard write(m_write_mutex);
  if (auto have = find(record.info.name); have && have->info.id == record.info.id) return false;
  if (auto ok = put_pin(m_store, record); !ok) return std::unexpected(ok.error());
  const PinInfo info = record.info;
  put_locked(build(std::move(record)));
  log(LogLevel::info, "pin_installed",
      {{"pin", info.name}, {"id", info.id}, {"node", info.node}, {"records", info.count}});
  return true;
}

Result<bool> PinTable::drop(const std::string& name) {
  std::lock_guard write(m_write_mutex);
  if (!find(name)) return false;
  if (auto ok = delete_pin(m_store, name); !ok) return std::unexpected(ok.error());
  erase_locked(name);
  log(LogLevel::info, "pin_dropped", {{"pin", name}, {"by", "fleet"}});
  return true;
}

std::shared_ptr<const PinTable::Pin> PinTable::find(std::string_view name) const {
  std::shared_lock lock(m_mutex);
  auto it = m_pins.find(name);
  return it == m_pins.end() ? nullptr : it->second;
}

std::vector<std::shared_ptr<const PinTable::Pin>> PinTable::list() const {
  std::shared_lock lock(m_mutex);
  std::vector<std::shared_ptr<const Pin>> out;
  for (const auto& [_, p] : m_pins) out.push_back(p);
  return out;
}

std::string PinTable::names() const {
  std::shared_lock lock(m_mutex);
  return names_locked();
}

std::string PinTable::names_locked() const {
  return m_pins.empty() ? "none" : joined(m_pins | std::views::keys);
}

}  // namespace ktune
