// Op lookup: best kernels for a problem, from memory (daemon/lookups.h).
#include "daemon/ops/ops.h"

namespace ktune {

std::string op_lookup(OpContext& ctx, const protocol::Request& req) {
  const auto t0 = std::chrono::steady_clock::now();
  auto answer = ctx.lookups.lookup(req.body, LookupService::Cold::build, req.raw, req.v);
  if (!answer) return reply_line(ctx, req, std::unexpected(answer.error()));
  return ctx.lookups.reply(req.id, **answer, t0);
}

std::optional<std::string> op_lookup_cached(OpContext& ctx, const protocol::Request& req) {
  const auto t0 = std::chrono::steady_clock::now();
  auto answer = ctx.lookups.lookup(req.body, LookupService::Cold::build_if_cheap, req.raw, req.v);
  if (!answer) return reply_line(ctx, req, std::unexpected(answer.error()));
  if (!*answer) return std::nullopt;  // cold and not cheap: the executor builds it
  return ctx.lookups.reply(req.id, **answer, t0);
}

}  // namespace ktune
