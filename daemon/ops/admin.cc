// Ops status and templates: what this daemon is and what it can tune.
#include <unistd.h>

#include <cmath>

#include "daemon/fleet/sync.h"
#include "daemon/jobs/queue.h"
#include "daemon/jobs/scheduler.h"
#include "daemon/kernels.h"
#include "daemon/ops/ops.h"

namespace ktune {

using protocol::Json;

OpReply op_status(OpContext& ctx, const protocol::Request&) {
  Json gpus = Json::array();
  for (const auto& g : ctx.node.gpus)
    gpus.push_back({{"ordinal", g.ordinal},
                    {"device_class", g.device_class.id()},
                    {"name", g.device_class.name},
                    {"pci_bus_id", g.pci_bus_id}});
  const MissTracker::Stats tracked = ctx.misses.stats();
  Json misses = Json::array();
  for (const auto& m : ctx.misses.top(10))
    misses.push_back({{"device", m.device.id()},
                      {"problem", m.problem.key()},
                      {"count", m.count},
                      {"worth_us", m.worth_us},
                      {"reason", m.reason}});
  const auto templates = ctx.templates.current();
  Json template_errors = Json::array();
  for (const auto& e : templates->errors()) template_errors.push_back(e.message);
  Json jobs = Json::object();
  for (const auto& [state, n] : ctx.jobs.counts()) jobs[std::string(to_string(state))] = n;
  Json lanes = Json::array();
  if (ctx.scheduler)
    for (const auto& l : ctx.scheduler->lanes()) lanes.push_back(to_json(l));
  const auto caches = ctx.lookups.cache_stats();
  auto cache_json = [](const LruStats& l) {
    return Json{{"entries", l.entries}, {"bytes", l.bytes}, {"max_bytes", l.max_bytes}};
  };
  const double uptime =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - ctx.started).count();
  return Json{{"version", KTUNE_VERSION},
              {"protocol", protocol::k_version},
              {"protocol_min", protocol::k_min_version},
              {"pid", ::getpid()},
              {"node_id", ctx.node.node_id},
              {"uptime_s", std::round(uptime * 10) / 10},
              {"socket", ctx.config.socket_path},
              {"tcp", ctx.config.tcp_address},
              {"data_dir", ctx.config.data_dir},
              {"store", ctx.store.describe()},
              {"winners", ctx.catalog.index().size()},
              {"device_classes", ctx.catalog.index().device_ids()},
              {"pins", ctx.pins.list().size()},
              {"templates", templates->all().size()},
              {"template_errors", template_errors},
              {"gpus", gpus},
              {"gpu_error", ctx.node.gpu_error},
              {"gpu_policy", ctx.config.gpu_policy},
              {"lanes", lanes},
              {"jobs", jobs},
              {"validators",
               {{"driver", ctx.node.driver},
                {"nvrtc", ctx.node.nvrtc},
                {"store_format", k_store_format_version}}},
              {"connections", ctx.metrics.connections()},
              {"requests", ctx.metrics.requests()},
              {"reloads",
               {{"ok", ctx.metrics.reloads(Metrics::Reload::ok)},
                {"failed", ctx.metrics.reloads(Metrics::Reload::failed)}}},
              {"answer_cache",
               {{"answers", cache_json(caches.answers)}, {"lines", cache_json(caches.lines)}}},
              {"misses",
               {{"total", tracked.total},
                {"distinct", tracked.distinct},
                {"bytes", tracked.bytes},
                {"max_bytes", tracked.max_bytes},
                {"evicted", tracked.evicted},
                {"top", misses}}},
              {"fleet", ctx.fleet ? ctx.fleet->summary() : Json{{"enabled", false}}}};
}

OpReply op_templates(OpContext& ctx, const protocol::Request&) {
  const auto templates = ctx.templates.current();
  Json list = Json::array();
  for (const auto& t : templates->all()) {
    const Manifest& m = t->manifest;
    Json params = Json::array();
    for (const auto& p : m.params) params.push_back({{"name", p.name}, {"values", p.values}});
    Json layouts = Json::array();
    for (const auto& [l, _] : m.layouts) layouts.push_back(l);
    list.push_back({{"name", m.name},
                    {"op", m.op},
                    {"version", m.version},
                    {"description", m.description},
                    {"hash", t->hash},
                    {"content_hash", t->content_hash},
                    {"dims", m.dims},
                    {"dtypes", m.dtypes},
                    {"out_dtypes", m.out_dtypes.empty() ? m.dtypes : m.out_dtypes},
                    {"layouts", layouts},
                    {"min_cc", m.min_cc},
                    {"max_cc", m.max_cc},
                    {"params", params},
                    {"space_size", m.space_size()},
                    {"path", m.path}});
  }
  Json errors = Json::array();
  for (const auto& e : templates->errors()) errors.push_back(e.message);
  return Json{{"templates", list}, {"errors", errors}};
}

}  // namespace ktune

namespace ktune {

namespace {

// The answer caches' families, one sample per cache ("answers" by key, "lines" by request text).
std::string answer_cache_metrics(const LookupService::CacheStats& c) {
  std::string s;
  auto family = [&](const char* name, const char* help, const char* type, auto value) {
    s += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
    for (const auto& [label, stats] :
         {std::pair{"answers", c.answers}, std::pair{"lines", c.lines}})
      s += std::string(name) + "{cache=\"" + label + "\"} " +
           std::to_string(value(stats, label == std::string_view("lines"))) + "\n";
  };
  family("ktune_answer_cache_entries", "Entries in the lookup answer caches.", "gauge",
         [](const LruStats& l, bool) { return l.entries; });
  family("ktune_answer_cache_bytes", "Bytes charged to the lookup answer caches.", "gauge",
         [](const LruStats& l, bool) { return l.bytes; });
  family("ktune_answer_cache_max_bytes", "Bound of each answer cache (server.answer_cache_bytes).",
         "gauge", [](const LruStats& l, bool) { return l.max_bytes; });
  family("ktune_answer_cache_hits_total", "Answer cache probes that found a valid entry.",
         "counter", [](const LruStats& l, bool) { return l.hits; });
  family("ktune_answer_cache_misses_total", "Answer cache probes that found none.", "counter",
         [](const LruStats& l, bool) { return l.misses; });
  family("ktune_answer_cache_evictions_total", "Least recently used entries evicted for room.",
         "counter", [](const LruStats& l, bool) { return l.evictions; });
  family("ktune_answer_cache_refused_total",
         "Entries not stored: over the bound alone, or a request line over 4 KiB.", "counter",
         [&](const LruStats& l, bool lines) { return l.refused + (lines ? c.lines_too_long : 0); });
  s += "# HELP ktune_answers_built_total Lookup answers built (cold lookups that did the work).\n"
       "# TYPE ktune_answers_built_total counter\nktune_answers_built_total " +
       std::to_string(c.built) + "\n";
  s += "# HELP ktune_answer_builds_joined_total Cold lookups that waited for another's build of "
       "their key.\n# TYPE ktune_answer_builds_joined_total counter\n"
       "ktune_answer_builds_joined_total " +
       std::to_string(c.joined) + "\n";
  s += "# HELP ktune_answers_built_inline_total Of the answers built, those built on an I/O thread "
       "(server.inline_build_us).\n# TYPE ktune_answers_built_inline_total counter\n"
       "ktune_answers_built_inline_total " +
       std::to_string(c.built_inline) + "\n";
  s += "# HELP ktune_answer_build_cpu_us Average CPU time of an op's recent answer builds "
       "(limit <= 8), compared with server.inline_build_us.\n"
       "# TYPE ktune_answer_build_cpu_us gauge\n";
  for (const auto& [op, us] : c.build_cpu_us)
    s += "ktune_answer_build_cpu_us{op=\"" + op + "\"} " + std::to_string(us) + "\n";
  s += "# HELP ktune_answers_kept_total Cached answers of an older index generation that no "
       "change since touched, kept.\n# TYPE ktune_answers_kept_total counter\n"
       "ktune_answers_kept_total " +
       std::to_string(c.kept) + "\n";
  return s;
}

}  // namespace

std::string op_metrics_gauges(OpContext& ctx) {
  std::string s;
  auto gauge = [&](const char* name, const char* help, const char* type, double value) {
    s += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " " + type + "\n" +
         name + " " + std::to_string(value) + "\n";
  };
  gauge("ktune_winners", "Winner records in the index.", "gauge",
        double(ctx.catalog.index().size()));
  gauge("ktune_templates", "Templates served (a reload may change them).", "gauge",
        double(ctx.templates.current()->all().size()));
  gauge("ktune_lookup_misses_total", "Lookups with no exact answer.", "counter",
        double(ctx.misses.total()));
  const MissTracker::Stats tracked = ctx.misses.stats();
  gauge("ktune_missed_keys", "Distinct keys missed (bounded).", "gauge", double(tracked.distinct));
  gauge("ktune_missed_keys_bytes", "Bytes charged to the missed keys (tuning.miss_tracker_bytes).",
        "gauge", double(tracked.bytes));
  gauge("ktune_missed_keys_evicted_total", "Missed keys forgotten to stay within the bound.",
        "counter", double(tracked.evicted));
  gauge("ktune_gpus", "GPUs this node tunes on.", "gauge", double(ctx.node.gpus.size()));
  s += "# HELP ktune_jobs Tuning jobs, by state.\n# TYPE ktune_jobs gauge\n";
  for (const auto& [state, n] : ctx.jobs.counts())
    s += "ktune_jobs{state=\"" + std::string(to_string(state)) + "\"} " + std::to_string(n) + "\n";
  gauge("ktune_job_queue_length", "Jobs waiting for a lane.", "gauge", double(ctx.jobs.queued()));
  s += answer_cache_metrics(ctx.lookups.cache_stats());
  if (ctx.scheduler) s += ctx.scheduler->metrics_text();
  if (ctx.kernels) s += ctx.kernels->metrics_text();
  if (ctx.fleet) s += ctx.fleet->metrics_text();
  return s;
}

}  // namespace ktune
