// The CLI's job commands: tune (through the daemon, with a live progress bar from watch), jobs,
// job, cancel, misses, plan apply.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <sstream>

#include "client/cli/commands.h"
#include "client/cli/output.h"
#include "client/cli/table.h"
#include "config/problem.h"
#include "config/text.h"

namespace ktune::cli {

using protocol::Json;

namespace {

std::string job_line(const Json& j) {
  std::string s = j["id"].get<std::string>() + "  " + j["state"].get<std::string>() + "  " +
                  j["problem"].get<std::string>() + " on " + j["device"].get<std::string>();
  if (j["trials"].get<int>() > 0)
    s += "  " + std::to_string(j["trials"].get<int>()) + "/" +
         std::to_string(j["budget_trials"].get<int>()) + " trials";
  if (j["best_us"].get<double>() > 0) s += "  best " + fixed(j["best_us"].get<double>(), 2) + " us";
  return s;
}

void print_job(const Json& j) {
  std::printf("%s\n", job_line(j).c_str());
  if (!j["best"].get<std::string>().empty())
    std::printf("  best      %s\n", j["best"].get<std::string>().c_str());
  std::printf("  origin    %s, priority %s, strategy %s\n", j["origin"].get<std::string>().c_str(),
              fixed(j["priority"].get<double>(), 0).c_str(),
              j["strategy"].get<std::string>().c_str());
  if (j["reused"].get<int>() > 0)
    std::printf("  resumed   %d trials reused from an interrupted run\n", j["reused"].get<int>());
  if (!j["message"].get<std::string>().empty())
    std::printf("  message   %s\n", j["message"].get<std::string>().c_str());
}

std::string read_file(const std::string& path, std::string& error) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    error = path + ": cannot open";
    return "";
  }
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// "unknown template 'x' (installed: ...)" for the first of `names` the daemon does not serve; ""
// when it serves them all or cannot say. The tune op calls an unknown template a bad_request
// (docs/protocol.md); the CLI reports it as not_found (exit 5), as `kernel --template` does.
std::string unknown_template(Client& client, const std::vector<std::string>& names) {
  auto installed = client.templates();
  if (!installed) return "";
  std::vector<std::string> have;
  for (const auto& t : (*installed)["templates"]) have.push_back(t["name"].get<std::string>());
  for (const auto& name : names)
    if (std::find(have.begin(), have.end(), name) == have.end())
      return "unknown template '" + name + "' (installed: " + joined(have) + ")";
  return "";
}

}  // namespace

int cmd_tune(const Common& c, const TuneArgs& a) {
  if (a.standalone) return cmd_tune_standalone(c, a);
  auto dims = parse_dims(a.problem.shape);
  if (!dims) return usage(c.json, "--shape: " + dims.error().message);
  protocol::ProblemSpec spec{a.problem.op, a.problem.dtype, a.problem.out_dtype, a.problem.layout,
                             *dims};
  Client::TuneOptions options{a.device, a.strategy, a.budget, a.seconds, a.only_templates, {}};
  for (const auto& text : a.seeds) {
    auto seed = parse_params(text);
    if (!seed) return usage(c.json, "--seed " + text + ": " + seed.error().message);
    options.seeds.push_back(std::move(*seed));
  }
  Client client(c.client_options());
  auto r = client.tune(spec, options);
  if (!r && r.error().kind == protocol::ErrorKind::bad_request && !a.only_templates.empty())
    if (auto unknown = unknown_template(client, a.only_templates); !unknown.empty())
      return report_failure(c.json, Exit::not_found, "not_found", unknown);
  if (!r) return report_device_error(c.json, r.error(), a.device);
  const Json job = (*r)["job"];
  const std::string id = job["id"].get<std::string>();
  if (!c.json)
    std::fprintf(stderr, "%s job %s: %s on %s\n",
                 (*r)["created"].get<bool>() ? "queued" : "following the existing", id.c_str(),
                 job["problem"].get<std::string>().c_str(),
                 job["device"].get<std::string>().c_str());
  if (a.no_wait) {
    if (c.json) return print_json(*r), 0;
    std::printf("%s\n", id.c_str());
    return 0;
  }
  const bool tty = ::isatty(STDERR_FILENO) && !c.json;
  auto final_job = client.watch(id, [&](const Json& j) {
    if (!c.json && !tty) return;
    if (!tty) return;
    const int budget = std::max(1, j["budget_trials"].get<int>());
    const int trials = j["trials"].get<int>();
    const int width = 30, done = std::min(width, width * trials / budget);
    const double elapsed = j["started"].get<std::int64_t>() > 0
                               ? double(std::time(nullptr) - j["started"].get<std::int64_t>())
                               : 0;
    const double eta = trials > j["reused"].get<int>()
                           ? elapsed / (trials - j["reused"].get<int>()) * (budget - trials)
                           : 0;
    std::fprintf(
        stderr, "\r[%s%s] %s %d/%d trials  best %s  %s  ETA %s   ",
        std::string(size_t(done), '=').c_str(), std::string(size_t(width - done), ' ').c_str(),
        j["state"].get<std::string>().c_str(), trials, budget,
        j["best_us"].get<double>() > 0 ? (fixed(j["best_us"].get<double>(), 2) + " us").c_str()
                                       : "-",
        clock_text(elapsed).c_str(), clock_text(eta).c_str());
  });
  if (tty) std::fprintf(stderr, "\n");
  if (!final_job) return report_error(c.json, final_job.error());
  if (c.json)
    print_json({{"job", *final_job}});
  else
    print_job(*final_job);
  return (*final_job)["state"] == "done" ? 0 : 1;
}

int cmd_jobs(const Common& c, const std::string& state, int limit) {
  Client client(c.client_options());
  auto r = client.jobs(limit, state);
  if (!r) return report_error(c.json, r.error());
  if (c.json) return print_json(*r), 0;
  TextTable table({"JOB", "STATE", "ORIGIN", "PROBLEM", "DEVICE", "TRIALS", "BEST US", "LANE"});
  for (const auto& j : (*r)["jobs"])
    table.add({j["id"].get<std::string>(), j["state"].get<std::string>(),
               j["origin"].get<std::string>(), j["problem"].get<std::string>(),
               j["device"].get<std::string>(),
               std::to_string(j["trials"].get<int>()) + "/" +
                   std::to_string(j["budget_trials"].get<int>()),
               j["best_us"].get<double>() > 0 ? fixed(j["best_us"].get<double>(), 2) : "-",
               j["lane"].get<int>() >= 0 ? std::to_string(j["lane"].get<int>()) : "-"});
  std::fputs(table.render().c_str(), stdout);
  std::string counts;
  for (auto it = (*r)["counts"].begin(); it != (*r)["counts"].end(); ++it)
    counts += (counts.empty() ? "" : ", ") + std::to_string(it.value().get<int>()) + " " + it.key();
  std::printf("%s\n", counts.c_str());
  return 0;
}

int cmd_job(const Common& c, const std::string& id) {
  Client client(c.client_options());
  auto r = client.job(id);
  if (!r) return report_error(c.json, r.error());
  if (c.json) return print_json({{"job", *r}}), 0;
  print_job(*r);
  return 0;
}

int cmd_cancel(const Common& c, const std::string& id) {
  Client client(c.client_options());
  auto r = client.cancel(id);
  if (!r) return report_error(c.json, r.error());
  if (c.json) return print_json({{"job", *r}}), 0;
  const std::string state = (*r)["state"].get<std::string>();
  std::printf("job %s: %s\n", id.c_str(),
              state == "running" ? "cancelling (stops at its next trial)" : state.c_str());
  return 0;
}

int cmd_misses(const Common& c, int limit) {
  Client client(c.client_options());
  auto r = client.misses(limit);
  if (!r) return report_error(c.json, r.error());
  if (c.json) return print_json(*r), 0;
  TextTable table(
      {"PROBLEM", "DEVICE", "MISSES", "EXPECTED US", "GAIN", "WORTH US", "QUEUED", "WHY"});
  for (const auto& m : (*r)["top"])
    table.add({m["problem"].get<std::string>(), m["device"].get<std::string>(),
               std::to_string(m["count"].get<std::uint64_t>()),
               fixed(m["expected_us"].get<double>(), 1), fixed(m["gain"].get<double>(), 2),
               fixed(m["worth_us"].get<double>(), 0), m["queued"].get<bool>() ? "yes" : "no",
               m["reason"].get<std::string>()});
  std::fputs(table.render().c_str(), stdout);
  std::printf(
      "%lu misses over %zu keys; a key becomes a job at %s us of expected GPU time saved%s\n",
      (*r)["total"].get<unsigned long>(), (*r)["distinct"].get<size_t>(),
      fixed((*r)["threshold_us"].get<double>(), 0).c_str(),
      (*r)["on_miss"].get<bool>() ? "" : " (tuning.on_miss is off)");
  return 0;
}

int cmd_plan_apply(const Common& c, const std::string& file, const std::string& device) {
  std::string error;
  const std::string text = read_file(file, error);
  if (!error.empty()) return failed(c.json, error);
  Client client(c.client_options());
  auto r = client.plan(text, device);
  if (!r) return report_error(c.json, r.error());
  if (c.json) return print_json(*r), 0;
  for (const auto& j : (*r)["jobs"]) std::printf("%s\n", job_line(j).c_str());
  std::printf("%d jobs queued, %d already queued or running\n", (*r)["created"].get<int>(),
              (*r)["existing"].get<int>());
  return 0;
}

}  // namespace ktune::cli
