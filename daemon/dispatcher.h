// Dispatcher: the policy stage and the op table — every request line passes here, with no socket
// in sight.
//
// For each line, in order: parse (JSON object, "v", "op"), version, authentication (a TCP peer
// must carry a configured token; nothing, a cache included, answers before this), the op table
// (protocol::k_ops: unknown ops are refused with the list), rights (an admin op from a read-only
// peer is refused: daemon/access.h), metrics, then the handler of
// daemon/ops/. The thread is chosen by the op's flags: a fast op answered from memory (a cached
// lookup) runs on the calling I/O thread; everything else (cold lookups, imports, exports, job
// control, status) is posted to the executor, so a cached answer never queues behind disk or
// compilation. Replies go to an Emit callback, once per line (several for a streamed op such as
// watch), possibly from an executor thread. Never throws.
//
// Thread-safety: handle() and append_fast() may be called concurrently from every I/O thread.
#pragma once

#include <algorithm>
#include <optional>
#include <string>
#include <string_view>

#include "daemon/access.h"
#include "daemon/executor.h"
#include "daemon/ops/ops.h"
#include "daemon/request_handler.h"

namespace ktune {

struct Response {
  std::string line;  // every reply line of the request, newlines included
};

class Dispatcher final : public RequestHandler {
 public:
  // `executor` runs blocking ops; null runs them inline on the caller (tests, tools).
  // REQUIRES: `ctx` and `executor` outlive the dispatcher and every reply still in flight.
  Dispatcher(OpContext& ctx, Executor* executor);

  // Appends a reply from memory for a trusted peer's line (a repeated lookup) to `out`, or says
  // false. Microseconds.
  bool append_fast(std::string_view line, const Peer& peer, std::string& out) override;
  // Handles one request line (without its newline) and its attachment (empty when the line
  // announced none); each reply line goes to `emit`. With `lane` (the client's, make_lane()), a
  // lookup that memory cannot answer runs on it: one client's cold lookups are built one after
  // another, so a client flooding never-seen shapes holds one executor thread, not all of them.
  void handle(std::string_view line, std::string attachment, const Peer& peer, Emit emit,
              const Executor::Lane* lane = nullptr) override;
  // A lane for one client's handle() calls; nullopt without an executor.
  std::optional<Executor::Lane> make_lane() override;
  // Runs one request to its last reply line and returns them all (tests and synchronous callers):
  // append_fast() first, then handle(), as a session does.
  Response handle(std::string_view line, const Peer& peer = {}, std::string attachment = {});

  // The config's max_attachment_bytes.
  size_t max_attachment_bytes() const override {
    return size_t(std::max(0, m_ctx.config.max_attachment_bytes));
  }

  OpContext& context() { return m_ctx; }
  // The executor blocking work runs on; null when ops run inline (tests, tools).
  Executor* executor() const { return m_executor; }
  // Gauges for the metrics endpoint (winners, templates, misses, jobs, lanes).
  std::string metrics_gauges() { return op_metrics_gauges(m_ctx); }

 private:
  // handle()'s body: the policy stage, then the handler on its thread. `id` and `v` receive the
  // request's id and version as soon as they are known, for the error reply should anything
  // throw.
  void policy(std::string_view line, std::string attachment, const Peer& peer, Emit& emit,
              protocol::Json& id, int& v, const Executor::Lane* lane);

  OpContext& m_ctx;
  Executor* m_executor;
};

}  // namespace ktune
