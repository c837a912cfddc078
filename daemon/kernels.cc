#include "daemon/kernels.h"

#include <algorithm>

#include "config/text.h"
#include "daemon/launch.h"
#include "store/records.h"
#include "templates/space.h"

namespace ktune {
namespace {

using protocol::ErrorKind;
using protocol::Json;

constexpr size_t k_max_log = 4000;  // bytes of an NVRTC log quoted in an error

}  // namespace

// Every param named once, known to the template and inside its domain.
protocol::Expected<Params> checked_params(
    const Manifest& m, const std::vector<std::pair<std::string, std::int64_t>>& given) {
  Params params;
  for (const auto& [name, value] : given) {
    const ParamDomain* d = m.param(name);
    if (!d) {
      return protocol::error(ErrorKind::bad_request,
                             "template " + m.name + " has no param " + name +
                                 " (its params: " + joined(m.params, &ParamDomain::name) + ")");
    }
    if (std::find(d->values.begin(), d->values.end(), value) == d->values.end())
      return protocol::error(
          ErrorKind::bad_request,
          "params." + name + " = " + std::to_string(value) + " is outside template " + m.name +
              "'s space (" + joined(d->values, [](std::int64_t v) { return std::to_string(v); }) +
              ")");
    if (!params.emplace(name, value).second)
      return protocol::error(ErrorKind::bad_request, "params." + name + " given twice");
  }
  for (const auto& p : m.params)
    if (!params.count(p.name))
      return protocol::error(ErrorKind::bad_request, "missing params." + p.name);
  return params;
}

KernelService::KernelService(const TemplateSet& templates, const LookupService& lookups,
                             Store* cubins, CompileFn compile)
    : m_templates(templates), m_lookups(lookups), m_cubins(cubins), m_compile(std::move(compile)) {}

KernelService::~KernelService() {
  stop();
}

void KernelService::stop() {
  std::unique_lock lock(m_shared->mutex);
  m_shared->stopped = true;
  m_shared->running.clear();
  m_shared->idle.wait(lock, [&] { return m_shared->delivering == 0; });
}

protocol::Expected<KernelService::Validated> KernelService::validate(
    const protocol::KernelRequest& r) const {
  TemplateSet::Snapshot templates = m_templates.current();
  auto problem = m_lookups.canonical_problem(r.problem, *templates);
  if (!problem) return std::unexpected(problem.error());
  auto device = m_lookups.resolve_device(r.device);
  if (!device) return std::unexpected(device.error());
  const auto& [dev, limits] = *device;
  const KernelTemplate* t = templates->find(r.template_name);
  if (!t) {
    return protocol::error(ErrorKind::not_found,
                           "unknown template '" + r.template_name + "' (installed: " +
                               joined(templates->all(), [](const auto& x) { return x->name(); }) +
                               ")");
  }
  if (!r.template_hash.empty() && !t->same_kernel(r.template_hash))
    return protocol::error(ErrorKind::not_found,
                           "stale entry: template " + t->name() + " here has hash " + t->hash +
                               ", the entry names " + r.template_hash +
                               " (the template changed since that answer; look the problem up "
                               "again)");
  const std::string arch = target_arch(t->manifest, dev.cc);
  if (!r.arch.empty() && r.arch != arch)
    return protocol::error(ErrorKind::bad_request,
                           "arch " + r.arch + " does not match device class " + dev.id() +
                               ": template " + t->name() + " compiles for " + arch + " there");
  if (!t->manifest.supports(*problem, dev.cc))
    return protocol::error(ErrorKind::invalid_problem,
                           "template " + t->name() + " does not implement " + problem->describe() +
                               " on " + dev.id() + " (sm_" + std::to_string(dev.cc) + ")");
  auto params = checked_params(t->manifest, r.params);
  if (!params) return std::unexpected(params.error());
  auto inst = instantiate(*t, *problem, limits, *params);
  if (!inst)
    return protocol::error(
        ErrorKind::bad_request,
        "params not valid for " + problem->key() + " on " + dev.id() + ": " + inst.error().message);
  Validated v;
  v.templates = std::move(templates);
  v.compile = CompileRequest{t, inst->name_expression, arch};
  v.image.template_name = t->name();
  v.image.template_hash = t->hash;
  v.image.params.assign(params->begin(), params->end());
  v.image.device = dev.id();
  v.image.problem_key = problem->key();
  v.image.nvrtc = Compiler::nvrtc_version();
  v.image.launch = describe_launch(*t, *inst, arch);
  return v;
}

void KernelService::fetch(const protocol::KernelRequest& request, Done done) {
  auto v = validate(request);
  Shared& s = *m_shared;
  {
    std::lock_guard lock(s.mutex);
    ++s.stats.requests;
    if (!v) ++s.stats.errors;
  }
  if (!v) return done(std::unexpected(v.error()));
  const std::string id = v->image.launch.cubin_id;
  if (m_cubins) {
    auto cached = get_cubin(*m_cubins, Compiler::cache_key(v->compile));
    if (cached && *cached) {
      {
        std::lock_guard lock(s.mutex);
        ++s.stats.cache;
      }
      return done(reply(std::move(v->image), **cached, "cache"));
    }
  }
  {
    std::lock_guard lock(s.mutex);
    if (s.stopped) return;  // shutting down: nobody to answer
    auto [it, first] = s.running.try_emplace(id);
    it->second.push_back(Waiter{std::move(v->image), std::move(done)});
    if (!first) {
      ++s.stats.shared;
      return;  // answered when the compile already running finishes
    }
    ++s.stats.compiles;
  }
  // The callback holds the snapshot: the template compiled stays alive until the compile ends.
  m_compile(std::move(v->compile), [shared = m_shared, id, keep = std::move(v->templates)](
                                       CompileResult result) { finish(*shared, id, result); });
}

void KernelService::finish(Shared& s, const std::string& cubin_id, const CompileResult& result) {
  std::vector<Waiter> waiters;
  {
    std::lock_guard lock(s.mutex);
    auto it = s.running.find(cubin_id);
    if (s.stopped || it == s.running.end()) return;
    waiters = std::move(it->second);
    s.running.erase(it);
    if (!result.ok()) s.stats.errors += waiters.size();
    ++s.delivering;
  }
  for (size_t i = 0; i < waiters.size(); ++i) {
    Waiter& w = waiters[i];
    if (!result.ok()) {
      w.done(protocol::error(ErrorKind::internal,
                             "NVRTC could not compile " + w.image.launch.name_expression + " for " +
                                 w.image.launch.arch + ": " + result.log.substr(0, k_max_log)));
      continue;
    }
    const char* source = i > 0 ? "shared" : result.cache_hit ? "cache" : "compiled";
    w.done(reply(std::move(w.image), result.kernel, source));
  }
  std::lock_guard lock(s.mutex);
  if (--s.delivering == 0) s.idle.notify_all();
}

protocol::Expected<Json> KernelService::reply(protocol::KernelImage image, const CubinEntry& cubin,
                                              std::string source) {
  image.lowered_name = cubin.lowered_name;
  image.registers = cubin.registers;
  image.smem_static = cubin.smem_bytes;
  image.spill_bytes = cubin.spill_stores + cubin.spill_loads;
  image.compile_ms = cubin.compile_ms;
  image.source = std::move(source);
  image.cubin = cubin.cubin;
  return protocol::to_json(image);
}

KernelService::Stats KernelService::stats() const {
  std::lock_guard lock(m_shared->mutex);
  return m_shared->stats;
}

std::string KernelService::metrics_text() const {
  const Stats s = stats();
  std::string out =
      "# HELP ktune_kernel_requests_total kernel op requests, by how they were answered: cache "
      "(the cubins family), compiled (started an NVRTC compile), shared (joined a running "
      "compile), error (refused or failed).\n"
      "# TYPE ktune_kernel_requests_total counter\n";
  auto line = [&](const char* source, std::uint64_t n) {
    out += std::string("ktune_kernel_requests_total{source=\"") + source + "\"} " +
           std::to_string(n) + "\n";
  };
  line("cache", s.cache);
  line("compiled", s.compiles);
  line("shared", s.shared);
  line("error", s.errors);
  return out;
}

}  // namespace ktune
