// Op lookup: best kernels for a problem, from memory (daemon/lookups.h).
#include "daemon/ops/ops.h"

namespace ktune {

namespace {

// A plain line's request was read already; any other line's is read from its body here.
auto lookup(OpContext& ctx, const protocol::Request& req, LookupService::Cold cold) {
  return req.lookup ? ctx.lookups.lookup(*req.lookup, cold, req.raw, req.v)
                    : ctx.lookups.lookup(req.body, cold, req.raw, req.v);
}

}  // namespace

std::string op_lookup(OpContext& ctx, const protocol::Request& req) {
  const auto t0 = std::chrono::steady_clock::now();
  auto answer = lookup(ctx, req, LookupService::Cold::build);
  if (!answer) return reply_line(ctx, req, std::unexpected(answer.error()));
  return ctx.lookups.reply(req.id, **answer, t0);
}

std::optional<std::string> op_lookup_cached(OpContext& ctx, const protocol::Request& req) {
  const auto t0 = std::chrono::steady_clock::now();
  auto answer = lookup(ctx, req, LookupService::Cold::build_if_cheap);
  if (!answer) return reply_line(ctx, req, std::unexpected(answer.error()));
  if (!*answer) return std::nullopt;  // cold and not cheap: the executor builds it
  return ctx.lookups.reply(req.id, **answer, t0);
}

}  // namespace ktune
