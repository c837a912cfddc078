#include "daemon/fleet/winners.h"

#include <map>

#include "daemon/fleet/record_codec.h"
#include "store/table_io.h"

namespace ktune {
namespace {

// KEYS: winners hash, fence, events, devices, trials.
// ARGV: field, expected value ("" = absent), value, token ("" = unfenced), device, node,
//       commit time (unix us), stream length, write ("1") or only check the fence ("0").
// Replies {"fenced", fence}, {"changed", current value}, {"kept"} or {"written", event id}.
constexpr const char* k_publish_script = R"lua(
if ARGV[4] ~= '' then
  local f = redis.call('GET', KEYS[2])
  if f ~= ARGV[4] then return {'fenced', f or ''} end
end
if ARGV[9] ~= '1' then
  if ARGV[4] ~= '' then redis.call('DEL', KEYS[5]) end
  return {'kept'}
end
local cur = redis.call('HGET', KEYS[1], ARGV[1])
if (cur or '') ~= ARGV[2] then return {'changed', cur or ''} end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[3])
redis.call('SADD', KEYS[4], ARGV[5])
if ARGV[4] ~= '' then redis.call('DEL', KEYS[5]) end
local id = redis.call('XADD', KEYS[3], 'MAXLEN', '~', ARGV[8], '*', 'device', ARGV[5],
                      'key', ARGV[1], 'node', ARGV[6], 'us', ARGV[7], 'value', ARGV[3])
return {'written', id}
)lua";

}  // namespace

FleetWinners::FleetWinners(RedisLink& link, const FleetLayout& layout, std::string node,
                           Rule replace)
    : m_link(link), m_layout(layout), m_node(std::move(node)), m_replace(std::move(replace)) {}

bool FleetWinners::should_replace(const std::string& current, const WinnerRecord& record,
                                  bool news) const {
  if (current.empty()) return true;
  auto stored = parse_winner_value(current);
  if (!stored) return true;  // unreadable: a valid record replaces it
  if (*stored == record) return false;
  return m_replace ? m_replace(*stored, record, news) : prefer_incoming(*stored, record);
}

Result<FleetWinners::Published> FleetWinners::publish(const WinnerRecord& record,
                                                      const std::string& token,
                                                      std::int64_t commit_us) {
  const std::string device = record.device.id(), field = record.problem.key();
  const std::string key = device + "/" + field, value = winner_value(record);
  auto current = m_link.command({"HGET", m_layout.winners(device), field});
  if (!current) return std::unexpected(current.error());
  std::string cur = current->str;
  for (int attempt = 0; attempt < 16; ++attempt) {
    const bool write = should_replace(cur, record, commit_us != 0);
    if (!write && token.empty()) return Published::kept;
    auto r = m_link.command({"EVAL", k_publish_script, "5", m_layout.winners(device),
                             m_layout.fence(key), m_layout.events(), m_layout.devices(),
                             m_layout.trials(key), field, cur, value, token, device, m_node,
                             std::to_string(commit_us), std::to_string(k_fleet_stream_length),
                             write ? "1" : "0"});
    if (!r) return std::unexpected(r.error());
    const std::string& verdict = r->at(0).str;
    if (verdict == "written") return Published::written;
    if (verdict == "kept") return Published::kept;
    if (verdict == "fenced") return r->at(1).str.empty() ? Published::unfenced : Published::fenced;
    cur = r->at(1).str;  // "changed": another node wrote meanwhile; decide again
  }
  return fail(ErrorCode::unavailable, key + ": the fleet's record kept changing; publish later");
}

Result<std::vector<std::string>> FleetWinners::device_ids() {
  auto r = m_link.command({"SMEMBERS", m_layout.devices()});
  if (!r) return std::unexpected(r.error());
  std::vector<std::string> out;
  for (const auto& e : r->elements) out.push_back(e.str);
  return out;
}

Result<std::vector<std::pair<std::string, std::string>>> FleetWinners::read_all(
    const std::string& device_id) {
  std::map<std::string, std::string> fields;  // HSCAN may return a field twice
  std::string cursor = "0";
  do {
    auto r = m_link.command({"HSCAN", m_layout.winners(device_id), cursor, "COUNT", "1000"});
    if (!r) return std::unexpected(r.error());
    cursor = r->at(0).str;
    const auto& items = r->at(1).elements;
    for (size_t i = 0; i + 1 < items.size(); i += 2) fields[items[i].str] = items[i + 1].str;
  } while (cursor != "0");
  return std::vector<std::pair<std::string, std::string>>(fields.begin(), fields.end());
}

}  // namespace ktune
