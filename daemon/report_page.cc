// `/report`: the tuning report of this daemon, built from what its ops already answer.
#include "daemon/report_page.h"

#include <ctime>

#include "report/report.h"

namespace ktune {

namespace {

// An op's result for a request with no arguments (defaults apply), or null when it failed.
protocol::Json op_result(OpReply (*op)(OpContext&, const protocol::Request&), OpContext& ctx,
                         protocol::Json body) {
  protocol::Request req;
  req.body = std::move(body);
  auto reply = op(ctx, req);
  return reply ? std::move(*reply) : protocol::Json();
}

}  // namespace

std::string render_report_page(OpContext& ctx) {
  report::ReportInput in;
  in.title = "ktuned " + ctx.node.node_id + ": tuning report";
  in.generated_by = "ktuned /report";
  in.generated_at = report::utc_now();
  // Undecodable records are left out and said, not allowed to empty the page.
  auto note = [&in](const char* what, const auto& result, const Skipped& skipped) {
    if (!result)
      in.notes.push_back(std::string("the store's ") + what +
                         " could not be read: " + result.error().message);
    if (skipped.count > 0)
      in.notes.push_back(
          std::to_string(skipped.count) + " " + what +
          " record(s) could not be decoded and are left out; the first: " + skipped.first);
  };
  Skipped bad_winners, bad_trials;
  auto winners = scan_winners(ctx.store, "", &bad_winners);
  note("winners", winners, bad_winners);
  if (winners) in.winners = std::move(*winners);
  auto trials = scan_trials(ctx.store, "", &bad_trials);
  note("trials", trials, bad_trials);
  if (trials) in.trial_sets = report::trial_sets_from_records(std::move(*trials));
  in.status = op_result(op_status, ctx, protocol::Json::object());
  in.misses = op_result(op_misses, ctx, protocol::Json{{"limit", 50}});
  in.jobs = op_result(op_jobs, ctx, protocol::Json{{"limit", 200}});
  return report::render_report(in);
}

}  // namespace ktune
