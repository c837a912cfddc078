// FleetWinners: the fleet's table in Redis — one hash of winner records per device class, and an
// events stream that tells every node about each change within a second (docs/fleet.md).
//
// publish() is a compare-and-set under a merge rule: a record reaches the hash only when the rule
// prefers it to the one there. ktuned's rule (Catalog::fleet_replaces) is import's
// (store/table_io.h prefer_incoming) between records of the same versions, so among nodes of one
// NVRTC, driver and template set the hash holds, per key, the best of everything published,
// whatever the order, and a node that reads it (full resync) ends where the stream would have led
// it; across versions, a node's newer measurement replaces a record it cannot serve. A publication
// made under a claim carries the claim's token and is refused when the key's fence moved on
// (another node claimed the key after this one's lease ran out): a node that lost its lease cannot
// publish over a newer result. Thread-safe as its RedisLink is.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "daemon/fleet/layout.h"
#include "daemon/fleet/redis_link.h"
#include "store/records.h"
#include "store/table_io.h"

namespace ktune {

class FleetWinners {
 public:
  // `replace(stored, incoming, news)`: whether `incoming` takes the place of the hash's `stored`
  // record (different records); `news`: a publication of a fresh commit (commit_us != 0), not a
  // resync's republication. Empty: prefer_incoming.
  using Rule =
      std::function<bool(const WinnerRecord& stored, const WinnerRecord& incoming, bool news)>;
  FleetWinners(RedisLink& link, const FleetLayout& layout, std::string node, Rule replace = {});

  enum class Published {
    written,   // the hash holds it now; an event went out
    kept,      // the hash holds this record already, or one the merge rule prefers
    fenced,    // refused: the key was claimed again after `token` (nothing written)
    unfenced,  // refused: the key has no fence at all (Redis lost its data); nobody claimed it
  };
  // Publishes `record`, committed on this node at `commit_us` (unix µs; carried in the event so
  // receivers can tell how long it took to reach them; 0: a republication, not a fresh commit).
  // `token` "" publishes unfenced (imports, catch-up after an outage); otherwise only while the
  // key's fence is still `token`.
  Result<Published> publish(const WinnerRecord& record, const std::string& token,
                            std::int64_t commit_us);

  // Device class ids with a winners hash.
  Result<std::vector<std::string>> device_ids();
  // Every (problem key, value) of one device class's hash, read in pages (HSCAN).
  Result<std::vector<std::pair<std::string, std::string>>> read_all(const std::string& device_id);

 private:
  // Whether the hash's current value (its text) must give way to `record`.
  bool should_replace(const std::string& current, const WinnerRecord& record, bool news) const;

  RedisLink& m_link;
  const FleetLayout& m_layout;
  const std::string m_node;
  const Rule m_replace;
};

}  // namespace ktune
