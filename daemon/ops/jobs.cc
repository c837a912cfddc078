// Job ops: tune, plan, jobs, job, cancel, watch, misses. Jobs run on the scheduler's lanes
// (daemon/jobs/); these handlers only queue, list, cancel and stream them.
#include <yaml-cpp/yaml.h>

#include "config/text.h"
#include "daemon/jobs/queue.h"
#include "daemon/jobs/scheduler.h"
#include "daemon/kernels.h"
#include "daemon/ops/ops.h"
#include "tuner/strategy/registry.h"

namespace ktune {

using protocol::ErrorKind;
using protocol::Json;

namespace {

// Priorities are expected GPU microseconds saved; explicit asks outrank what misses are worth.
constexpr double k_request_priority = 1e12;
constexpr double k_plan_priority = 1e9;

struct Target {
  DeviceClass device;
  Problem problem;
};

// The strategy a tune/plan request names (default: the config's), checked against the registry.
protocol::Expected<std::string> job_strategy(OpContext& ctx, const Json& body) {
  auto strategy = protocol::get_string(body, "strategy", false, ctx.config.strategy);
  if (!strategy) return std::unexpected(strategy.error());
  const auto names = strategy_names();
  if (std::find(names.begin(), names.end(), *strategy) == names.end()) {
    return protocol::error(ErrorKind::bad_request,
                           "unknown strategy '" + *strategy + "' (" + joined(names) + ")");
  }
  return *strategy;
}

constexpr size_t k_max_seeds = 64;

// "templates" (names of templates that implement the problem's op; absent: every one) and "seeds"
// (configs, {"NAME": value, ...}, each a whole config of one of those templates) of a tune/plan
// request, into `s` (whose problem is set).
protocol::Expected<void> job_templates_and_seeds(OpContext& ctx, const Json& body, JobSpec& s) {
  const auto registry = ctx.templates.current();
  std::vector<const KernelTemplate*> candidates;
  if (auto it = body.find("templates"); it != body.end()) {
    if (!it->is_array() || it->empty())
      return protocol::error(ErrorKind::bad_request,
                             "\"templates\" must be a non-empty array of template names");
    for (const auto& n : *it) {
      if (!n.is_string())
        return protocol::error(ErrorKind::bad_request, "\"templates\" must hold template names");
      const std::string name = n.get<std::string>();
      const KernelTemplate* t = registry->find(name);
      if (!t) return protocol::error(ErrorKind::bad_request, "unknown template '" + name + "'");
      if (t->manifest.op != s.problem.op)
        return protocol::error(ErrorKind::bad_request, "template " + name + " implements " +
                                                           t->manifest.op + ", not " + s.problem.op);
      if (std::find(s.templates.begin(), s.templates.end(), name) != s.templates.end()) continue;
      s.templates.push_back(name);
      candidates.push_back(t);
    }
  } else {
    for (const auto& t : registry->all())
      if (t->manifest.op == s.problem.op) candidates.push_back(t.get());
  }
  auto it = body.find("seeds");
  if (it == body.end()) return {};
  if (!it->is_array() || it->size() > k_max_seeds)
    return protocol::error(ErrorKind::bad_request,
                           "\"seeds\" must be an array of at most " + std::to_string(k_max_seeds) +
                               " configs ({\"NAME\": value, ...})");
  for (size_t i = 0; i < it->size(); ++i) {
    const std::string where = "seeds[" + std::to_string(i) + "]";
    auto given = protocol::config_from_json((*it)[i], where, where);
    if (!given) return std::unexpected(given.error());
    // A seed that is a whole config of no candidate would never be measured: refuse it, with why.
    std::string why;
    std::optional<Params> config;
    for (const KernelTemplate* t : candidates) {
      auto p = checked_params(t->manifest, *given);
      if (p) {
        config = std::move(*p);
        break;
      }
      why += (why.empty() ? "" : "; ") + p.error().message;
    }
    if (!config)
      return protocol::error(ErrorKind::bad_request,
                             where + " is a config of none of the templates it could seed: " + why);
    s.seeds.push_back(std::move(*config));
  }
  return {};
}

// Resolves the device and the canonical problem and checks this node can tune them, after what
// is wrong with the request itself (the problem, the templates and seeds it names).
protocol::Expected<Target> tunable(OpContext& ctx, const protocol::ProblemSpec& spec,
                                   const std::string& device_name, const Json& body) {
  const auto templates = ctx.templates.current();
  auto problem = ctx.lookups.canonical_problem(spec, *templates);
  if (!problem) return std::unexpected(problem.error());
  // What is wrong with the request itself comes before what this node lacks.
  if (auto why = templates->why_unsupported(*problem, -1); !why.empty())
    return protocol::error(ErrorKind::invalid_problem, why);
  // So do the templates and seeds it names: they depend on the op, not on the GPU.
  JobSpec named;
  named.problem = *problem;
  if (auto ok = job_templates_and_seeds(ctx, body, named); !ok) return std::unexpected(ok.error());
  auto device = ctx.lookups.resolve_device(device_name);
  if (!device) return std::unexpected(device.error());
  const std::string id = device->first.id();
  if (!ctx.scheduler || !ctx.scheduler->can_tune(id)) {
    const std::string have =
        joined(ctx.node.gpus, [](const auto& g) { return g.device_class.id(); });
    return protocol::error(ErrorKind::unavailable,
                           "this node cannot tune for " + id + " (its GPUs: " +
                               (have.empty() ? "none, " + ctx.node.gpu_error : have) + ")");
  }
  if (auto why = templates->why_unsupported(*problem, device->first.cc); !why.empty())
    return protocol::error(ErrorKind::invalid_problem, why);
  return Target{device->first, std::move(*problem)};
}

// Strategy and budget of a tune/plan request, defaulting to the config.
protocol::Expected<JobSpec> job_spec(OpContext& ctx, const Json& body, Target target,
                                     std::string origin, double default_priority) {
  JobSpec s;
  s.device = std::move(target.device);
  s.problem = std::move(target.problem);
  s.origin = std::move(origin);
  auto strategy = job_strategy(ctx, body);
  if (!strategy) return std::unexpected(strategy.error());
  s.strategy = *strategy;
  auto trials = protocol::get_int(body, "budget_trials", ctx.config.budget_trials);
  if (!trials) return std::unexpected(trials.error());
  if (*trials < 1 || *trials > 10'000'000)
    return protocol::error(ErrorKind::bad_request, "\"budget_trials\" must be 1..10000000");
  s.budget_trials = int(*trials);
  s.budget_seconds = ctx.config.budget_seconds;
  if (auto it = body.find("budget_seconds"); it != body.end()) {
    if (!it->is_number() || it->get<double>() <= 0)
      return protocol::error(ErrorKind::bad_request,
                             "\"budget_seconds\" must be a positive number");
    s.budget_seconds = it->get<double>();
  }
  s.priority = default_priority;
  if (auto it = body.find("priority"); it != body.end()) {
    if (!it->is_number())
      return protocol::error(ErrorKind::bad_request, "\"priority\" must be a number");
    s.priority = it->get<double>();
  }
  if (auto ok = job_templates_and_seeds(ctx, body, s); !ok) return std::unexpected(ok.error());
  return s;
}

protocol::Expected<std::string> job_id(const Json& body) {
  auto id = protocol::get_string(body, "job", true);
  if (!id) return std::unexpected(id.error());
  return *id;
}

// A problem of a plan: {op, dtype, out_dtype?, layout?, dims: {name: value}}.
protocol::Expected<protocol::ProblemSpec> plan_problem(const YAML::Node& n, size_t i) {
  const std::string where = "problems[" + std::to_string(i) + "]";
  if (!n.IsMap()) return protocol::error(ErrorKind::bad_request, where + ": expected a mapping");
  protocol::ProblemSpec p;
  try {
    for (const auto& kv : n) {
      const std::string key = kv.first.as<std::string>();
      if (key == "op")
        p.op = kv.second.as<std::string>();
      else if (key == "dtype")
        p.dtype = kv.second.as<std::string>();
      else if (key == "out_dtype")
        p.out_dtype = kv.second.as<std::string>();
      else if (key == "layout")
        p.layout = kv.second.as<std::string>();
      else if (key == "dims") {
        if (!kv.second.IsMap())
          return protocol::error(ErrorKind::bad_request, where + ".dims: expected name: integer");
        for (const auto& d : kv.second)
          p.dims.emplace_back(d.first.as<std::string>(), d.second.as<std::int64_t>());
      } else {
        return protocol::error(ErrorKind::bad_request, where + ": unknown key '" + key + "'");
      }
    }
  } catch (const YAML::Exception& e) {
    return protocol::error(ErrorKind::bad_request, where + ": " + e.what());
  }
  if (p.op.empty() || p.dtype.empty() || p.dims.empty())
    return protocol::error(ErrorKind::bad_request, where + ": needs op, dtype and dims");
  return p;
}

}  // namespace

Json job_json(const JobRecord& j) {
  return Json{{"id", j.id},
              {"state", std::string(to_string(j.state))},
              {"device", j.device.id()},
              {"problem", j.problem.key()},
              {"origin", j.origin},
              {"priority", j.priority},
              {"strategy", j.strategy},
              {"budget_trials", j.budget_trials},
              {"budget_seconds", j.budget_seconds},
              {"trials", j.trials_done},
              {"reused", j.reused},
              {"best_us", j.best_us},
              {"best", j.best},
              {"lane", j.lane},
              {"created", j.created},
              {"started", j.started},
              {"finished", j.finished},
              {"updated", j.updated},
              {"message", j.message},
              {"templates", j.templates},
              {"seeds", j.seeds}};
}

OpReply op_tune(OpContext& ctx, const protocol::Request& req) {
  auto pj = req.body.find("problem");
  if (pj == req.body.end()) return protocol::error(ErrorKind::bad_request, "missing \"problem\"");
  auto spec = protocol::problem_from_json(*pj);
  if (!spec) return std::unexpected(spec.error());
  auto device = protocol::get_string(req.body, "device", false);
  if (!device) return std::unexpected(device.error());
  if (auto strategy = job_strategy(ctx, req.body); !strategy)
    return std::unexpected(strategy.error());
  auto target = tunable(ctx, *spec, *device, req.body);
  if (!target) return std::unexpected(target.error());
  auto js = job_spec(ctx, req.body, std::move(*target), "request", k_request_priority);
  if (!js) return std::unexpected(js.error());
  auto submitted = ctx.jobs.submit(*js);
  if (!submitted) return as_protocol(submitted.error());  // a full queue, or the store's failure
  return Json{{"job", job_json(submitted->job)}, {"created", submitted->created}};
}

OpReply op_plan(OpContext& ctx, const protocol::Request& req) {
  auto text = protocol::get_string(req.body, "plan", true);
  if (!text) return std::unexpected(text.error());
  auto device = protocol::get_string(req.body, "device", false);
  if (!device) return std::unexpected(device.error());
  YAML::Node doc;
  try {
    doc = YAML::Load(*text);
  } catch (const YAML::Exception& e) {
    return protocol::error(ErrorKind::bad_request,
                           std::string("plan is not YAML/JSON: ") + e.what());
  }
  YAML::Node problems = doc.IsMap() ? doc["problems"] : doc;
  if (!problems || !problems.IsSequence() || problems.size() == 0)
    return protocol::error(ErrorKind::bad_request,
                           "a plan is a list of problems, or a mapping with \"problems:\"");
  std::string device_name = *device;
  if (doc.IsMap() && doc["device"] && device_name.empty()) {
    if (!doc["device"].IsScalar())
      return protocol::error(ErrorKind::bad_request, "plan: \"device\" must be a string");
    device_name = doc["device"].Scalar();
  }
  // Validate everything first: a plan is queued whole or not at all.
  std::vector<JobSpec> specs;
  std::string errors;
  for (size_t i = 0; i < problems.size(); ++i) {
    auto p = plan_problem(problems[i], i);
    protocol::Expected<Target> t =
        p ? tunable(ctx, *p, device_name, req.body) : std::unexpected(p.error());
    protocol::Expected<JobSpec> js =
        t ? job_spec(ctx, req.body, std::move(*t), "plan", k_plan_priority)
          : std::unexpected(t.error());
    if (!js) {
      errors += "\n  problems[" + std::to_string(i) + "]: " + js.error().message;
      continue;
    }
    specs.push_back(std::move(*js));
  }
  if (!errors.empty())
    return protocol::error(ErrorKind::invalid_problem, "plan rejected, nothing queued:" + errors);
  auto submitted = ctx.jobs.submit_all(specs);
  if (!submitted) return as_protocol(submitted.error());  // a full queue, or the store's failure
  Json jobs = Json::array();
  int created = 0;
  for (const auto& s : *submitted) {
    created += s.created;
    jobs.push_back(job_json(s.job));
  }
  return Json{{"jobs", jobs}, {"created", created}, {"existing", int(specs.size()) - created}};
}

OpReply op_jobs(OpContext& ctx, const protocol::Request& req) {
  auto limit = protocol::get_int(req.body, "limit", 50);
  if (!limit) return std::unexpected(limit.error());
  if (*limit < 1 || *limit > 100'000)
    return protocol::error(ErrorKind::bad_request, "\"limit\" must be 1..100000");
  auto state_name = protocol::get_string(req.body, "state", false);
  if (!state_name) return std::unexpected(state_name.error());
  std::optional<JobState> state;
  if (!state_name->empty()) {
    auto s = parse_job_state(*state_name);
    if (!s)
      return protocol::error(ErrorKind::bad_request,
                             s.error().message + " (queued, running, done, failed, cancelled)");
    state = *s;
  }
  Json list = Json::array();
  for (const auto& j : ctx.jobs.list(size_t(*limit), state)) list.push_back(job_json(j));
  Json counts = Json::object();
  for (const auto& [s, n] : ctx.jobs.counts()) counts[std::string(to_string(s))] = n;
  return Json{{"jobs", list}, {"counts", counts}};
}

OpReply op_job(OpContext& ctx, const protocol::Request& req) {
  auto id = job_id(req.body);
  if (!id) return std::unexpected(id.error());
  auto job = ctx.jobs.get(*id);
  if (!job) return protocol::error(ErrorKind::not_found, "no job " + *id);
  return job_json(*job);
}

OpReply op_cancel(OpContext& ctx, const protocol::Request& req) {
  auto id = job_id(req.body);
  if (!id) return std::unexpected(id.error());
  auto job = ctx.jobs.cancel(*id);
  if (!job) return as_protocol(job.error());  // no such job, or the store's failure
  return job_json(*job);
}

void op_watch(OpContext& ctx, const protocol::Request& req, Emit emit) {
  auto id = job_id(req.body);
  if (!id) return void(emit(reply_line(ctx, req, std::unexpected(id.error())), true));
  const Json rid = req.id;
  const int v = req.v;
  // The notice is an error reply like any other: counted in ktune_errors_total. Metrics, not
  // ctx, is captured: daemon.cc declares it before the queue whose stop() sends the notice.
  Metrics& metrics = ctx.metrics;
  const bool known =
      ctx.jobs.watch(*id, [&metrics, rid, v, emit](const JobRecord& j, JobQueue::WatchEvent event) {
        if (event == JobQueue::WatchEvent::stopped) {  // the watch ends before the job
          metrics.count_error(ErrorKind::unavailable);
          return emit(protocol::reply_error(rid, ErrorKind::unavailable,
                                            "ktuned is stopping; job " + j.id + " is " +
                                                std::string(to_string(j.state)) +
                                                " and resumes when ktuned starts again: watch it "
                                                "then",
                                            v),
                      true);
        }
        const bool end = j.state == JobState::done || j.state == JobState::failed ||
                         j.state == JobState::cancelled;
        Json line = {{"v", v}, {"id", rid}, {"ok", true}};
        line[end ? "result" : "event"] = job_json(j);
        return emit(protocol::dump_line(line), end);
      });
  if (!known)
    emit(reply_line(ctx, req, protocol::error(ErrorKind::not_found, "no job " + *id)), true);
}

OpReply op_misses(OpContext& ctx, const protocol::Request& req) {
  auto limit = protocol::get_int(req.body, "limit", 20);
  if (!limit) return std::unexpected(limit.error());
  if (*limit < 1 || *limit > 10'000)
    return protocol::error(ErrorKind::bad_request, "\"limit\" must be 1..10000");
  Json top = Json::array();
  for (const auto& m : ctx.misses.top(size_t(*limit)))
    top.push_back({{"device", m.device.id()},
                   {"problem", m.problem.key()},
                   {"count", m.count},
                   {"expected_us", m.expected_us},
                   {"gain", m.gain},
                   {"worth_us", m.worth_us},
                   {"queued", m.promoted},
                   {"reason", m.reason}});
  return Json{{"total", ctx.misses.total()},
              {"distinct", ctx.misses.distinct()},
              {"threshold_us", ctx.config.miss_threshold_us},
              {"on_miss", ctx.config.tune_on_miss},
              {"top", top}};
}

}  // namespace ktune
