// Op kernel: the compiled cubin of a template config, with its launch description
// (daemon/kernels.h). Asynchronous: the handler validates and returns; the reply is sent when the
// cubin is ready (from the store at once, or from the compile pool).
#include "daemon/kernels.h"
#include "daemon/ops/ops.h"

namespace ktune {

void op_kernel(OpContext& ctx, const protocol::Request& req, Emit emit) {
  if (!ctx.kernels)
    return void(emit(reply_line(ctx, req,
                                protocol::error(protocol::ErrorKind::unavailable,
                                                "this daemon serves no kernels (no compiler)")),
                     true));
  auto request = protocol::kernel_request_from_json(req.body);
  if (!request) return void(emit(reply_line(ctx, req, std::unexpected(request.error())), true));
  const protocol::Json id = req.id;
  const int v = req.v;
  ctx.kernels->fetch(*request, [&ctx, id, v, emit](protocol::Expected<protocol::Json> result) {
    emit(reply_line(ctx, id, std::move(result), v), true);
  });
}

}  // namespace ktune
