// PinTable: the pins this node serves (store/pins.h), held in memory so that a lookup naming a
// pin is answered like any other — from memory, in microseconds, never with a store read.
//
// A pin is an immutable snapshot of winner records (every device class, or one; every op, or
// one) taken from the live index at creation. With a fleet (fleet.redis), create() first
// publishes the pin through the PinPublisher (daemon/fleet/pins.h), which refuses a name that
// exists fleet-wide and makes the pin reach every node; then the pin is written to the store
// (sync, survives restarts) and installed. Pins read from the fleet arrive through install()
// and drop(). Every change moves the live index's answer generation in the same critical section,
// which invalidates cached lookup answers (a name deleted and created again must never be
// answered from its predecessor, nor a deleted pin once find() no longer sees it).
// Thread-safe: readers share a lock; writers are serialized on another (store and Redis calls
// are made under it, never under the readers' lock).
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <vector>

#include "daemon/node.h"
#include "daemon/winner_index.h"
#include "store/pins.h"

namespace ktune {

// Where pins go fleet-wide (FleetPins). Called under the PinTable's writer lock.
class PinPublisher {
 public:
  virtual ~PinPublisher() = default;
  // Publishes a new pin; already_exists (saying where and when it was made) when the fleet has a
  // pin of that name, unavailable when Redis cannot be reached (the pin is then not created:
  // a pin other nodes cannot see would defeat it).
  virtual Result<void> publish_pin(const PinRecord& pin) = 0;
  // Withdraws a pin fleet-wide; unavailable when Redis cannot be reached.
  virtual Result<void> withdraw_pin(const PinInfo& pin) = 0;
};

class PinTable {
 public:
  struct Pin {
    PinInfo info;
    WinnerIndex index;  // the pinned records, searched like the live index
  };
  struct Filter {
    std::string device;  // a device class id; "" = every class
    std::string op;      // "" = every op
  };

  PinTable(Store& store, WinnerIndex& live, const NodeIdentity& node);

  // Reads every pin from the store (at start). A pin that does not read is logged and skipped:
  // the rest of the node must still start.
  Result<void> load();

  // Snapshots the live index's records matching `filter` as pin `name`. Errors: invalid_argument
  // (name), already_exists (here or, with a fleet, anywhere in the fleet), not_found (nothing
  // matches), invalid_argument (over k_max_pin_records, or k_max_pins pins), unavailable (fleet
  // configured but Redis unreachable).
  Result<PinInfo> create(const std::string& name, const Filter& filter);
  // Deletes pin `name` here and, with a fleet, fleet-wide. not_found naming the known pins.
  Result<PinInfo> remove(const std::string& name);

  // From the fleet: stores and serves `pin` in place of any pin of its name. Returns false when
  // this pin (same id) is already here.
  Result<bool> install(PinRecord pin);
  // From the fleet: deletes pin `name` when it is here; returns whether it was.
  Result<bool> drop(const std::string& name);

  std::shared_ptr<const Pin> find(std::string_view name) const;
  std::vector<std::shared_ptr<const Pin>> list() const;  // by name
  // "a, b" (or "none") for error messages.
  std::string names() const;
  // A pin with its records again (to publish it, or for `ktune pin show`).
  static PinRecord record(const Pin& pin);

  // With a fleet: where create() and remove() publish. Set before serving.
  void set_publisher(PinPublisher* publisher) { m_publisher = publisher; }

 private:
  static std::shared_ptr<const Pin> build(PinRecord pin);
  void put_locked(std::shared_ptr<const Pin> pin);
  void erase_locked(const std::string& name);
  std::string names_locked() const;

  Store& m_store;
  WinnerIndex& m_live;  // read; invalidate_answers() when a pin changes
  const NodeIdentity& m_node;
  PinPublisher* m_publisher = nullptr;
  std::mutex m_write_mutex;           // create, remove, install, drop: one at a time
  mutable std::shared_mutex m_mutex;  // guards m_pins
  std::map<std::string, std::shared_ptr<const Pin>, std::less<>> m_pins;
};

}  // namespace ktune
