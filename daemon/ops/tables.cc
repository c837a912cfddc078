// Ops export and import: tuning tables as text, in and out. The daemon never opens a path a
// client names: an import carries the table's content.
#include "daemon/ops/ops.h"
#include "store/table_io.h"

namespace ktune {

using protocol::ErrorKind;
using protocol::Json;

OpReply op_export(OpContext& ctx, const protocol::Request& req) {
  auto format_name = protocol::get_string(req.body, "format", false, "json");
  if (!format_name) return std::unexpected(format_name.error());
  auto format = parse_table_format(*format_name);
  if (!format) return protocol::error(ErrorKind::bad_request, format.error().message);
  auto device = protocol::get_string(req.body, "device", false);
  if (!device) return std::unexpected(device.error());
  // The device is named as in a lookup (any unique part of a class id); one that names no class
  // is not_found, not an empty table.
  std::string device_id;
  if (!device->empty()) {
    auto resolved = ctx.lookups.resolve_device(*device);
    if (!resolved) return std::unexpected(resolved.error());
    device_id = resolved->first.id();
  }
  auto winners = scan_winners(ctx.store, device_id);
  if (!winners) return protocol::error(ErrorKind::internal, winners.error().message);
  Json result = {{"format", *format_name}, {"count", winners->size()}};
  result["content"] = render_table(*winners, *format);  // moved in: the table's one copy
  return result;
}

OpReply op_import(OpContext& ctx, const protocol::Request& req) {
  if (req.body.contains("path"))
    return protocol::error(ErrorKind::bad_request,
                           "\"path\" is not accepted: the daemon never opens a file a client "
                           "names; send the table's content as \"table\" (ktune import does)");
  // The table comes inline ("table") or, when larger than a frame, as the attachment.
  auto table = protocol::get_string(req.body, "table", req.attachment.empty());
  if (!table) return std::unexpected(table.error());
  if (!req.attachment.empty() && !table->empty())
    return protocol::error(ErrorKind::bad_request, "give the table inline or attached, not both");
  const std::string_view text = req.attachment.empty() ? std::string_view(*table) : req.attachment;
  auto origin = protocol::get_string(req.body, "origin", false, "request");
  if (!origin) return std::unexpected(origin.error());
  auto report = ctx.catalog.import(text, *origin, Catalog::Written::moved_to_index);
  if (!report) {
    // A table of a newer format is the table's fault; the rest as any failure (an unreadable
    // table is bad_request, a store that failed a read or write internal).
    if (report.error().code == ErrorCode::format_mismatch)
      return protocol::error(ErrorKind::bad_request, report.error().message);
    return as_protocol(report.error());
  }
  if (!report->applied())
    return protocol::error(ErrorKind::bad_request, report->rejection_summary());
  return Json{{"total", report->total},
              {"added", report->added},
              {"replaced", report->replaced},
              {"kept", report->kept}};
}

}  // namespace ktune
