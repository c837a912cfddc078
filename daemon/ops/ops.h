// The op handlers: one function per op of protocol::k_ops, one file per op family
// (lookup.cc, tables.cc, jobs.cc, admin.cc, pins.cc, ...). Handlers never see a socket: the
// Dispatcher runs the policy stage (parse, version, auth, limits, metrics) first and decides the
// thread (an I/O thread only for fast, in-memory answers; the executor for everything else).
#pragma once

#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "client/protocol.h"
#include "config/config.h"
#include "daemon/catalog.h"
#include "daemon/lookups.h"
#include "daemon/metrics.h"
#include "daemon/misses.h"
#include "daemon/node.h"

namespace ktune {

class FleetSync;
class JobQueue;
class Scheduler;
class KernelService;

// What handlers work with. Owned by the daemon (daemon.cc) or a test; outlives the dispatcher.
struct OpContext {
  const DaemonConfig& config;
  Store& store;
  const TemplateSet& templates;  // take one snapshot (current()) per request
  Catalog& catalog;
  const NodeIdentity& node;
  Metrics& metrics;
  MissTracker& misses;
  LookupService& lookups;
  PinTable& pins;
  JobQueue& jobs;
  Scheduler* scheduler = nullptr;    // null: this daemon tunes nothing (no GPU lanes)
  KernelService* kernels = nullptr;  // null: the kernel op answers unavailable
  std::chrono::steady_clock::time_point started = std::chrono::steady_clock::now();
  FleetSync* fleet = nullptr;  // null: no fleet (fleet.redis unset)
};

using OpReply = protocol::Expected<protocol::Json>;
// Sends one line of a streamed reply; `last` ends the request. Returns false once the client is
// gone (the stream should stop). May be called from any thread.
using Emit = std::function<bool(std::string line, bool last)>;

struct OpHandler {
  std::string_view name;
  // One reply line (newline included), success or error.
  std::string (*call)(OpContext&, const protocol::Request&) = nullptr;
  // op_stream ops: every line goes through Emit.
  void (*stream)(OpContext&, const protocol::Request&, Emit) = nullptr;
  // op_fast ops: the reply line when it can be given from memory on the calling I/O thread,
  // nullopt to run `call` on the executor instead.
  std::optional<std::string> (*fast)(OpContext&, const protocol::Request&) = nullptr;
};

// The reply line for an OpReply: {"v","id","ok":true,"result"} or the error; counts errors.
// `v` is the request's protocol version (replies echo it).
std::string reply_line(OpContext& ctx, const protocol::Json& id, OpReply reply,
                       int v = protocol::k_min_version);
// The same for `req` (its id and version).
std::string reply_line(OpContext& ctx, const protocol::Request& req, OpReply reply);

// A failure of the daemon's own parts (store, queue, pins) as the error a client is sent: the
// caller's fault (invalid_argument) is bad_request; not_found, already_exists and unavailable
// keep their names; anything else (a store that failed a read or write) is internal.
std::unexpected<protocol::Error> as_protocol(const Error& e);

// Every handler, in protocol::k_ops order (tests check the two tables match).
std::span<const OpHandler> op_handlers();

// Per family (ops/*.cc). Lookup answers with a preformatted line (its result is cached as text).
std::string op_lookup(OpContext&, const protocol::Request&);
std::optional<std::string> op_lookup_cached(OpContext&, const protocol::Request&);
OpReply op_status(OpContext&, const protocol::Request&);
OpReply op_templates(OpContext&, const protocol::Request&);
OpReply op_export(OpContext&, const protocol::Request&);
OpReply op_import(OpContext&, const protocol::Request&);
OpReply op_tune(OpContext&, const protocol::Request&);
OpReply op_plan(OpContext&, const protocol::Request&);
OpReply op_jobs(OpContext&, const protocol::Request&);
OpReply op_job(OpContext&, const protocol::Request&);
OpReply op_cancel(OpContext&, const protocol::Request&);
void op_watch(OpContext&, const protocol::Request&, Emit);
OpReply op_misses(OpContext&, const protocol::Request&);
// Replies from the compile pool once the cubin is ready (op_async; daemon/kernels.h).
void op_kernel(OpContext&, const protocol::Request&, Emit);
OpReply op_fleet(OpContext&, const protocol::Request&);
OpReply op_pin(OpContext&, const protocol::Request&);
OpReply op_unpin(OpContext&, const protocol::Request&);
OpReply op_pins(OpContext&, const protocol::Request&);

// Shared by the job ops and the status op: a job as JSON for replies and events.
protocol::Json job_json(const JobRecord& job);
// Gauges owned by the handlers' objects (winners, templates, misses, jobs, lanes), for /metrics.
std::string op_metrics_gauges(OpContext& ctx);

}  // namespace ktune
