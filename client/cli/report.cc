// `ktune report`: the HTML tuning report (report/report.h) from files or from the running daemon.
#include <cstdio>
#include <ctime>
#include <fstream>
#include <sstream>

#include "client/cli/commands.h"
#include "client/cli/output.h"
#include "client/client.h"
#include "report/report.h"
#include "store/table_io.h"

namespace ktune::cli {

namespace {

bool read_whole(const std::string& path, std::string& text) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  std::ostringstream ss;
  ss << in.rdbuf();
  text = ss.str();
  return true;
}

// Winners from a table document (the export format); false after printing why.
bool add_table(const Common& c, std::string_view text, const std::string& origin,
               report::ReportInput& in) {
  std::vector<ImportRejection> rejected;
  auto winners = parse_table(text, origin, rejected);
  if (!winners) return failed(c.json, winners.error().message), false;
  for (const auto& r : rejected)
    std::fprintf(stderr, "ktune: %s: record %zu skipped: %s\n", origin.c_str(), r.index,
                 r.reason.c_str());
  in.winners.insert(in.winners.end(), winners->begin(), winners->end());
  return true;
}

// The daemon's winners (export), status, misses and jobs; an exit code on failure.
int add_daemon(const Common& c, const std::string& device, report::ReportInput& in) {
  Client client(c.long_op_options());
  auto table = client.export_table("json", device);
  if (!table) return report_error(c.json, table.error());
  if (!add_table(c, (*table)["content"].get_ref<const std::string&>(), "ktuned export", in))
    return 1;
  auto status = client.status();
  if (!status) return report_error(c.json, status.error());
  in.status = std::move(*status);
  auto misses = client.misses(50);
  if (!misses) return report_error(c.json, misses.error());
  in.misses = std::move(*misses);
  auto jobs = client.jobs(200);
  if (!jobs) return report_error(c.json, jobs.error());
  in.jobs = std::move(*jobs);
  return 0;
}

}  // namespace

int cmd_report(const Common& c, const ReportArgs& a) {
  report::ReportInput in;
  in.generated_at = report::utc_now();
  in.generated_by = "ktune report";
  if (!a.title.empty()) in.title = a.title;
  const bool from_files = !a.trials.empty() || !a.table.empty();
  for (const auto& path : a.trials) {
    std::string text;
    if (!read_whole(path, text)) return failed(c.json, path + ": cannot read");
    const std::string name = path.substr(path.find_last_of('/') + 1);
    if (report::is_replay_file(text)) {
      auto replays = report::parse_replay(text, name);
      if (!replays) return failed(c.json, replays.error().message);
      for (auto& r : *replays) in.replays.push_back(std::move(r));
      continue;
    }
    auto sets = report::parse_trials(text, name);
    if (!sets) return failed(c.json, sets.error().message);
    for (auto& s : *sets) in.trial_sets.push_back(std::move(s));
  }
  if (!a.table.empty()) {
    std::string text;
    if (!read_whole(a.table, text)) return failed(c.json, a.table + ": cannot read");
    if (!add_table(c, text, a.table, in)) return int(Exit::failed);
  }
  if (!from_files || a.daemon)
    if (int rc = add_daemon(c, a.device, in); rc != 0) return rc;
  report::apply_filter(in, report::Filter{.device = a.device, .op = a.op});
  const std::string page = report::render_report(in);
  if (a.output == "-") return std::fputs(page.c_str(), stdout), 0;
  if (auto ok = write_file_atomic(a.output, page); !ok) return failed(c.json, ok.error().message);
  size_t trials = 0;
  for (const auto& s : in.trial_sets) trials += s.trials.size();
  if (c.json)
    return print_json({{"path", a.output},
                       {"bytes", page.size()},
                       {"winners", in.winners.size()},
                       {"trials", trials}}),
           0;
  std::printf("wrote %s: %zu bytes, %zu winners, %zu recorded trials\n", a.output.c_str(),
              page.size(), in.winners.size(), trials);
  return 0;
}

}  // namespace ktune::cli
