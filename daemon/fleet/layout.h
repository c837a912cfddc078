// FleetLayout: the names of every Redis key ktune uses — the code form of docs/fleet.md (the
// versioned spec of the key layout; change both together, and the version with any change a
// node of the previous version would misread).
//
// Every key is "<namespace>:v<k_fleet_layout_version>:<name>", so fleets (or tests) share one
// Redis under different namespaces, and nodes of an incompatible layout never see each other's
// keys. Value type; thread-safe.
#pragma once

#include <string>

namespace ktune {

inline constexpr int k_fleet_layout_version = 1;
// The events stream is trimmed to about this many entries (XADD MAXLEN ~).
inline constexpr long k_fleet_stream_length = 100'000;
// A fence outlives its lease by this long: a node that wakes up later finds no fence and is
// refused as a stale holder would be.
inline constexpr long k_fleet_fence_ttl_ms = 7L * 24 * 3600 * 1000;
// The pin events stream is trimmed to about this many entries (pins change rarely).
inline constexpr long k_fleet_pin_stream_length = 1'000;
// Trials shared for a resume expire after this long without a write.
inline constexpr long k_fleet_trials_ttl_ms = 24L * 3600 * 1000;

class FleetLayout {
 public:
  explicit FleetLayout(const std::string& ns)
      : m_prefix(ns + ":v" + std::to_string(k_fleet_layout_version) + ":") {}

  // Hash: problem key -> winner record JSON (one per device class).
  std::string winners(const std::string& device_id) const {
    return m_prefix + "winners:" + device_id;
  }
  // Set: device class ids that have a winners hash.
  std::string devices() const { return m_prefix + "devices"; }
  // Stream: one entry per winner that changed a winners hash.
  std::string events() const { return m_prefix + "events"; }
  // String "<node> <token>" with a TTL: who is tuning "<device id>/<problem key>".
  std::string lease(const std::string& key) const { return m_prefix + "lease:" + key; }
  // String: the token of the latest claim on a key (fencing).
  std::string fence(const std::string& key) const { return m_prefix + "fence:" + key; }
  // Integer: the fleet's claim counter (the first part of every token).
  std::string fence_seq() const { return m_prefix + "fence_seq"; }
  // Hash: "<template>/<params>" -> encoded trial record, measured under a claim of the key.
  std::string trials(const std::string& key) const { return m_prefix + "trials:" + key; }
  // Hash: pin name -> pin header JSON ({"id", "node", "created", "count"}, or a tombstone
  // {"id", "node", "deleted": true} once deleted).
  std::string pins() const { return m_prefix + "pins"; }
  // String: the pin document (store/pins.h) of one pin, by name and id.
  std::string pin(const std::string& name, const std::string& id) const {
    return m_prefix + "pin:" + name + ":" + id;
  }
  // Stream: one entry per pin created or deleted.
  std::string pin_events() const { return m_prefix + "pin_events"; }
  // Hash: node name -> heartbeat JSON.
  std::string nodes() const { return m_prefix + "nodes"; }
  const std::string& prefix() const { return m_prefix; }

 private:
  std::string m_prefix;
};

}  // namespace ktune
