// Catalog: the one writer of winners.
//
// Imports, seed tables and tuning results all reach the store and the in-memory WinnerIndex
// through here, under one merge rule (store/table_io.h prefer_incoming, plus: a record that is
// stale on this node always yields to a fresh measurement), so every path that records a winner
// is one path. Each change bumps the index generation, which invalidates the cached answers it
// could alter (its family, near its shape: WinnerIndex::untouched_since). The catalog also swaps
// the templates it and every reader judge winners by (replace_templates, on reload), bumping the
// generation as a change to everything. Writers are serialized; readers use index()
// (thread-safe). Thread-safe.
#pragma once

#include <functional>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "daemon/node.h"
#include "daemon/winner_index.h"
#include "store/table_io.h"
#include "templates/registry.h"

namespace ktune {

class Catalog {
 public:
  // REQUIRES: every reference outlives the catalog.
  Catalog(Store& store, WinnerIndex& index, TemplateSet& templates, const NodeIdentity& node);

  // Fills the index from the store (at start).
  Result<void> load();
  // An import that writes at least this many records flushes the store's winners to its files.
  static constexpr size_t k_flush_after_records = 4096;

  // Validates and merges a JSON table (see store/table_io.h): all records or none. Beyond the
  // table rules, every record must be one this node's templates can serve (check_record). An
  // import that wrote k_flush_after_records or more then flushes them out of the store's memory.
  // `written`: whether the report hands back the records written (the fleet's merge reads them)
  // or they move into the index, the report's `written` coming back empty (a table a client or
  // the config imports: copies of a large one fragment the heap, bench/NOTES.md).
  enum class Written { returned, moved_to_index };
  Result<ImportReport> import(std::string_view text, std::string_view origin,
                              Written written = Written::returned);
  // Why a record may not be imported here ("" result: it may): its op is implemented by an
  // installed template for the record's device class; dims are named and ordered as the op's
  // templates declare; each ranked template is installed and implements the op; a config
  // measured with the installed version of its template (same hash) is within the declared
  // param domains and passes the constraints for the problem on the device's limits. A config
  // of another template version is accepted unchecked: it is never served as exact.
  Result<void> check_record(const WinnerRecord& record) const;
  Result<void> check_record(const WinnerRecord& record, const TemplateRegistry& templates) const;
  // Commits a winner measured on this node. Returns whether it is now the served record.
  Result<bool> commit(const WinnerRecord& record, std::string_view origin);

  // The fleet hash's merge rule as this node publishes (FleetWinners): whether `incoming` takes
  // the place of the fleet's `stored` record. Between records this node judges alike (both
  // servable as exact here, or neither: stale, or failing check_record) import's rule,
  // prefer_incoming. A record it can serve never gives way to one it cannot; one it cannot serve
  // gives way to one it can when that is `news` (a fresh commit here: a job's result, an import —
  // an upgraded node's first result, a rolled-back node's) or, republished by a resync, was
  // measured later; an old record republished must not move the hash back.
  bool fleet_replaces(const WinnerRecord& stored, const WinnerRecord& incoming, bool news) const;

  // Whether this node can serve `record` as exact: check_record passes and staleness is "".
  bool servable(const WinnerRecord& record, bool own_device) const;
  bool servable(const WinnerRecord& record, bool own_device,
                const TemplateRegistry& templates) const;

  // Why `record` cannot be served as exact on this node ("" when it can). `own_device`: the
  // record is for one of this node's GPUs (then the driver must match too).
  // Judged by the templates served now, or by a snapshot the caller holds.
  std::string staleness(const WinnerRecord& record, bool own_device) const;
  std::string staleness(const WinnerRecord& record, bool own_device,
                        const TemplateRegistry& templates) const;

  // Serves `next` instead of the templates loaded now, all or nothing: a registry with load
  // errors (a manifest that did not parse, a missing directory) is refused and the loaded one
  // stays. On a change, moves the index generation so no answer built from the old templates is
  // served again; winners measured with a changed template are stale from then on. Requests,
  // compiles and jobs that hold a snapshot keep theirs. Returns what changed.
  Result<TemplateChanges> replace_templates(TemplateRegistry next);
  // The templates served now (TemplateSet::current).
  TemplateSet::Snapshot templates() const { return m_templates.current(); }

  const WinnerIndex& index() const { return m_index; }
  Store& store() { return m_store; }
  // Called after every committed change (under the writer lock; keep it short).
  void on_change(std::function<void(const WinnerRecord&)> listener);

 private:
  void publish_locked(const WinnerRecord& record);

  Store& m_store;
  WinnerIndex& m_index;
  TemplateSet& m_templates;
  const NodeIdentity& m_node;
  std::mutex m_write_mutex;
  std::vector<std::function<void(const WinnerRecord&)>> m_listeners;
};

}  // namespace ktune
