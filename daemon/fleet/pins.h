// FleetPins: pins shared through the fleet's Redis (docs/fleet.md § Pins), so that a pin created
// on one node answers identically on every node — the point of a pin is that every rank of a
// distributed job, wherever it runs, gets the same kernels.
//
//   create on a node ──▶ publish_pin: one script writes the document and the header (refused
//                        when the name is live fleet-wide) and adds a pin event
//   pin_events stream ──▶ apply(): another node's create is read (GET) and installed; a delete
//                         drops the pin here
//   (re)connect ──▶ resync(): every header is read; pins missing or different here are
//                   installed, tombstoned ones dropped, and pins Redis lacks altogether (it
//                   lost its data) are published again
//
// Redis is authoritative for which pins exist; each node keeps its pins in its store and memory
// (PinTable), so lookups never touch Redis and pins survive restarts and outages. Creating or
// deleting a pin needs Redis: while it is unreachable both are refused (unavailable).
// Thread-safe as its links are.
#pragma once

#include <map>
#include <string>

#include "daemon/fleet/layout.h"
#include "daemon/fleet/redis_link.h"
#include "daemon/pins.h"

namespace ktune {

class FleetPins : public PinPublisher {
 public:
  // `link` for creates and deletes (client requests), `reader_link` for resync and events.
  FleetPins(RedisLink& link, RedisLink& reader_link, const FleetLayout& layout, PinTable& pins,
            std::string node);

  Result<void> publish_pin(const PinRecord& pin) override;
  Result<void> withdraw_pin(const PinInfo& pin) override;

  // The id of the pin_events entry to read after (call before resync()).
  Result<std::string> last_event_id();
  // Brings this node's pins in line with the fleet's (see above).
  Result<void> resync();
  // One entry of the pin_events stream, as field -> value.
  void apply(const std::map<std::string, std::string>& event);

  std::uint64_t received() const { return m_received.load(); }

 private:
  // Reads a pin document from Redis and installs it; false when it is gone (deleted since).
  Result<bool> fetch_and_install(const std::string& name, const std::string& id);
  Result<void> publish_with(RedisLink& link, const PinRecord& pin, bool republish);

  RedisLink& m_link;
  RedisLink& m_reader_link;
  const FleetLayout& m_layout;
  PinTable& m_pins;
  const std::string m_node;
  std::atomic<std::uint64_t> m_received{0};  // pins installed from the fleet
};

}  // namespace ktune
