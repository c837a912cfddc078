// Op fleet: this node's part in the fleet and what the fleet's Redis says (daemon/fleet/sync.h).
#include "daemon/fleet/sync.h"
#include "daemon/ops/ops.h"

namespace ktune {

OpReply op_fleet(OpContext& ctx, const protocol::Request&) {
  if (!ctx.fleet)
    return protocol::Json{{"enabled", false},
                          {"message", "no fleet: fleet.redis is not set (docs/operations.md)"}};
  return ctx.fleet->report();
}

}  // namespace ktune
