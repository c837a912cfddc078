// Ops pin, unpin and pins: named, immutable snapshots of the winners (daemon/pins.h), so that
// every rank of a distributed job is answered from the same records.
#include <nlohmann/json.hpp>

#include "daemon/ops/ops.h"
#include "daemon/pins.h"

namespace ktune {

using protocol::ErrorKind;
using protocol::Json;

namespace {

Json info_json(const PinInfo& p) {
  return Json{{"name", p.name},     {"id", p.id}, {"node", p.node},  {"created", p.created},
              {"device", p.device}, {"op", p.op}, {"count", p.count}};
}

protocol::Expected<std::string> name_of(const protocol::Request& req) {
  auto name = protocol::get_string(req.body, "name", true);
  if (!name) return std::unexpected(name.error());
  return *name;
}

}  // namespace

OpReply op_pin(OpContext& ctx, const protocol::Request& req) {
  auto name = name_of(req);
  if (!name) return std::unexpected(name.error());
  auto device = protocol::get_string(req.body, "device", false);
  if (!device) return std::unexpected(device.error());
  auto op = protocol::get_string(req.body, "problem_op", false);
  if (!op) return std::unexpected(op.error());
  PinTable::Filter filter;
  if (!device->empty()) {  // named as in a lookup; one that names no class is not_found
    auto resolved = ctx.lookups.resolve_device(*device);
    if (!resolved) return std::unexpected(resolved.error());
    filter.device = resolved->first.id();
  }
  if (!op->empty()) {
    bool known = false;
    for (const auto& t : ctx.templates.current()->all()) known = known || t->manifest.op == *op;
    if (!known)
      return protocol::error(ErrorKind::bad_request,
                             "\"problem_op\": no installed template implements '" + *op + "'");
    filter.op = *op;
  }
  auto info = ctx.pins.create(*name, filter);
  if (!info) return as_protocol(info.error());
  return info_json(*info);
}

OpReply op_unpin(OpContext& ctx, const protocol::Request& req) {
  auto name = name_of(req);
  if (!name) return std::unexpected(name.error());
  auto info = ctx.pins.remove(*name);
  if (!info) return as_protocol(info.error());
  return info_json(*info);
}

OpReply op_pins(OpContext& ctx, const protocol::Request& req) {
  auto name = protocol::get_string(req.body, "name", false);
  if (!name) return std::unexpected(name.error());
  if (name->empty()) {
    Json list = Json::array();
    for (const auto& p : ctx.pins.list()) list.push_back(info_json(p->info));
    return Json{{"pins", list}};
  }
  auto pin = ctx.pins.find(*name);
  if (!pin)
    return protocol::error(ErrorKind::not_found,
                           "no pin '" + *name + "' (pins: " + ctx.pins.names() + ")");
  Json result = info_json(pin->info);
  // The records as in a table document (docs/store-format.md), by key.
  Json doc = Json::parse(pin_document(PinTable::record(*pin)), nullptr, false);
  result["winners"] = doc.is_object() ? doc["winners"] : Json::array();
  return result;
}

}  // namespace ktune
