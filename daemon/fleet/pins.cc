#include "daemon/fleet/pins.h"

#include <nlohmann/json.hpp>
#include <set>

#include "config/log.h"

namespace ktune {
namespace {

using Json = nlohmann::json;

// KEYS: pins hash, the pin's document key, pin events.
// ARGV: name, header, document, node, id, stream length, "1" = a republication (only where
//       Redis has no header at all: it lost its data).
// Replies {"exists", current header} or {"created"}.
constexpr const char* k_create_script = R"lua(
local cur = redis.call('HGET', KEYS[1], ARGV[1])
if cur then
  if ARGV[7] == '1' or not cjson.decode(cur).deleted then return {'exists', cur} end
end
redis.call('SET', KEYS[2], ARGV[3])
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
redis.call('XADD', KEYS[3], 'MAXLEN', '~', ARGV[6], '*', 'action', 'create', 'name', ARGV[1],
           'id', ARGV[5], 'node', ARGV[4])
return {'created'}
)lua";

// KEYS: pins hash, pin events.
// ARGV: name, node, stream length, the prefix of document keys ("<ns>:v1:pin:<name>:").
// Replies {"deleted", id} or {"absent"}.
constexpr const char* k_delete_script = R"lua(
local cur = redis.call('HGET', KEYS[1], ARGV[1])
if not cur then return {'absent'} end
local h = cjson.decode(cur)
if h.deleted then return {'absent'} end
redis.call('DEL', ARGV[4] .. h.id)
redis.call('HSET', KEYS[1], ARGV[1], cjson.encode({id = h.id, node = ARGV[2], deleted = true}))
redis.call('XADD', KEYS[2], 'MAXLEN', '~', ARGV[3], '*', 'action', 'delete', 'name', ARGV[1],
           'id', h.id, 'node', ARGV[2])
return {'deleted', h.id}
)lua";

// A client's create or delete may be the first command on a connection Redis closed meanwhile
// (it restarted): one failure closes the link, and one immediate reconnect decides.
Result<RedisReply> command_once_more(RedisLink& link, const std::vector<std::string>& argv) {
  auto r = link.command(argv);
  if (r || r.error().code != ErrorCode::unavailable) return r;
  link.close();
  return link.command(argv);
}

Error unreachable(const Error& e, const std::string& doing) {
  return Error{ErrorCode::unavailable,
               "the fleet's Redis cannot be reached (" + e.message + "): " + doing +
                   " must reach every node of the fleet; try again when Redis is back"};
}

}  // namespace

FleetPins::FleetPins(RedisLink& link, RedisLink& reader_link, const FleetLayout& layout,
                     PinTable& pins, std::string node)
    : m_link(link),
      m_reader_link(reader_link),
      m_layout(layout),
      m_pins(pins),
      m_node(std::move(node)) {}

Result<void> FleetPins::publish_with(RedisLink& link, const PinRecord& pin, bool republish) {
  const Json header = {{"id", pin.info.id},
                       {"node", pin.info.node},
                       {"created", pin.info.created},
                       {"count", pin.info.count}};
  auto r =
      command_once_more(link, {"EVAL", k_create_script, "3", m_layout.pins(),
                               m_layout.pin(pin.info.name, pin.info.id), m_layout.pin_events(),
                               pin.info.name, header.dump(), pin_document(pin), m_node, pin.info.id,
                               std::to_string(k_fleet_pin_stream_length), republish ? "1" : "0"});
  if (!r) return std::unexpected(r.error());
  if (r->at(0).str == "created") return {};
  const Json cur = Json::parse(r->at(1).str, nullptr, false);
  if (republish && cur.is_object() && cur.value("id", "") == pin.info.id) return {};
  return fail(ErrorCode::already_exists,
              "pin '" + pin.info.name + "' exists in the fleet (created on " +
                  (cur.is_object() ? cur.value("node", std::string("?")) : "?") +
                  "); pins are immutable: delete it first to pin again under this name");
}

Result<void> FleetPins::publish_pin(const PinRecord& pin) {
  auto ok = publish_with(m_link, pin, false);
  if (!ok && ok.error().code == ErrorCode::unavailable)
    return std::unexpected(unreachable(ok.error(), "a pin"));
  return ok;
}

Result<void> FleetPins::withdraw_pin(const PinInfo& pin) {
  auto r = command_once_more(
      m_link, {"EVAL", k_delete_script, "2", m_layout.pins(), m_layout.pin_events(), pin.name,
               m_node, std::to_string(k_fleet_pin_stream_length), m_layout.pin(pin.name, "")});
  if (!r) {
    if (r.error().code == ErrorCode::unavailable)
      return std::unexpected(unreachable(r.error(), "deleting a pin"));
    return std::unexpected(r.error());
  }
  return {};  // "absent": the fleet no longer has it; it still goes here
}

Result<std::string> FleetPins::last_event_id() {
  auto last = m_reader_link.command({"XREVRANGE", m_layout.pin_events(), "+", "-", "COUNT", "1"});
  if (!last) return std::unexpected(last.error());
  return last->elements.empty() ? std::string("0-0") : last->at(0).at(0).str;
}

Result<bool> FleetPins::fetch_and_install(const std::string& name, const std::string& id) {
  auto body = m_reader_link.command({"GET", m_layout.pin(name, id)});
  if (!body) return std::unexpected(body.error());
  if (body->is_nil()) return false;  // deleted since: its tombstone or event follows
  auto pin = parse_pin_document(body->str);
  if (!pin || pin->info.name != name || pin->info.id != id) {
    log(LogLevel::warn, "fleet_pin_rejected",
        {{"pin", name}, {"id", id}, {"reason", pin ? "name or id differ" : pin.error().message}});
    return false;
  }
  auto installed = m_pins.install(std::move(*pin));
  if (!installed) return std::unexpected(installed.error());
  if (*installed) ++m_received;
  return *installed;
}

Result<void> FleetPins::resync() {
  auto all = m_reader_link.command({"HGETALL", m_layout.pins()});
  if (!all) return std::unexpected(all.error());
  std::set<std::string> in_fleet;
  for (size_t i = 0; i + 1 < all->elements.size(); i += 2) {
    const std::string& name = all->elements[i].str;
    const Json header = Json::parse(all->elements[i + 1].str, nullptr, false);
    if (!header.is_object() || !validate_pin_name(name)) continue;
    in_fleet.insert(name);
    const auto local = m_pins.find(name);
    if (header.value("deleted", false)) {
      if (local && local->info.id == header.value("id", "")) (void)m_pins.drop(name);
      continue;
    }
    if (local && local->info.id == header.value("id", "")) continue;
    if (auto ok = fetch_and_install(name, header.value("id", "")); !ok)
      return std::unexpected(ok.error());
  }
  // Pins Redis has no trace of: it lost its data (or was replaced). Publish them again.
  for (const auto& pin : m_pins.list())
    if (!in_fleet.count(pin->info.name))
      if (auto ok = publish_with(m_reader_link, PinTable::record(*pin), true); !ok) {
        if (ok.error().code == ErrorCode::unavailable) return ok;
        log(LogLevel::warn, "fleet_pin_republish_failed",
            {{"pin", pin->info.name}, {"error", ok.error().message}});
      }
  return {};
}

void FleetPins::apply(const std::map<std::string, std::string>& event) {
  auto field = [&](const char* k) {
    auto it = event.find(k);
    return it == event.end() ? std::string() : it->second;
  };
  const std::string action = field("action"), name = field("name"), id = field("id");
  if (field("node") == m_node || name.empty()) return;
  const auto local = m_pins.find(name);
  if (action == "create") {
    if (local && local->info.id == id) return;
    if (auto ok = fetch_and_install(name, id); !ok)
      log(LogLevel::error, "fleet_pin_install_failed",
          {{"pin", name}, {"error", ok.error().message}});
  } else if (action == "delete") {
    if (local && local->info.id == id)
      if (auto ok = m_pins.drop(name); !ok)
        log(LogLevel::error, "fleet_pin_drop_failed",
            {{"pin", name}, {"error", ok.error().message}});
  }
}

}  // namespace ktune
