// The CLI's pin commands: `ktune pin create|list|show|delete` — named, immutable snapshots of the
// winners that `ktune lookup --pin` (and every client's lookup with a pin) answers from
// (docs/operations.md § Pins).
#include <cstdio>
#include <ctime>

#include "client/cli/commands.h"
#include "client/cli/output.h"
#include "client/cli/table.h"
#include "config/log.h"

namespace ktune::cli {

using protocol::Json;

namespace {

std::string filter_text(const Json& p) {
  std::string device = p.value("device", ""), op = p.value("op", "");
  return (device.empty() ? "every device class" : device) + ", " +
         (op.empty() ? "every op" : "op " + op);
}

}  // namespace

int cmd_pin_create(const Common& c, const PinArgs& a) {
  Json body = {{"name", a.name}};
  if (!a.device.empty()) body["device"] = a.device;
  if (!a.op.empty()) body["problem_op"] = a.op;
  Client client(c.long_op_options());
  auto r = client.call("pin", body);
  if (!r) return report_error(c.json, r.error());
  if (c.json) return print_json(*r), 0;
  std::printf("pinned %s: %s winners (%s), id %s\n", a.name.c_str(), (*r)["count"].dump().c_str(),
              filter_text(*r).c_str(), r->value("id", "").c_str());
  std::printf("look up with it: ktune lookup OP --shape ... --pin %s\n", a.name.c_str());
  return 0;
}

int cmd_pin_list(const Common& c) {
  Client client(c.client_options());
  auto r = client.call("pins");
  if (!r) return report_error(c.json, r.error());
  if (c.json) return print_json(*r), 0;
  if ((*r)["pins"].empty()) {
    std::printf("no pins (ktune pin create NAME)\n");
    return 0;
  }
  TextTable table({"NAME", "WINNERS", "CREATED", "ON", "FILTER", "ID"});
  for (const auto& p : (*r)["pins"])
    table.add({p.value("name", ""), p["count"].dump(),
               utc_iso8601(p.value("created", std::int64_t(0))), p.value("node", ""),
               filter_text(p), p.value("id", "")});
  std::fputs(table.render().c_str(), stdout);
  return 0;
}

int cmd_pin_show(const Common& c, const std::string& name) {
  Client client(c.long_op_options());
  auto r = client.call("pins", {{"name", name}});
  if (!r) return report_error(c.json, r.error());
  if (c.json) return print_json(*r), 0;
  std::printf("pin %s: %s winners, created %s on %s (%s), id %s\n", name.c_str(),
              (*r)["count"].dump().c_str(),
              utc_iso8601(r->value("created", std::int64_t(0))).c_str(),
              r->value("node", "").c_str(), filter_text(*r).c_str(), r->value("id", "").c_str());
  TextTable table({"DEVICE", "PROBLEM", "TEMPLATE", "TIME_US", "NODE"});
  for (const auto& w : (*r)["winners"]) {
    const Json& d = w["device"];
    const Json& p = w["problem"];
    std::string dims;
    for (auto it = p["dims"].begin(); it != p["dims"].end(); ++it)
      dims += (dims.empty() ? "" : ",") + it.key() + "=" + it.value().dump();
    const Json& best = w["ranked"][0];
    table.add(
        {d.value("name", "") + " sm" + d["cc"].dump(),
         p.value("op", "") + " " + p.value("dtype", "") + " " + p.value("layout", "") + " " + dims,
         best.value("template", ""), fixed(best.value("median_us", 0.0), 2),
         w.value("node_id", "")});
  }
  std::fputs(table.render().c_str(), stdout);
  return 0;
}

int cmd_pin_delete(const Common& c, const std::string& name) {
  Client client(c.client_options());
  auto r = client.call("unpin", {{"name", name}});
  if (!r) return report_error(c.json, r.error());
  if (c.json) return print_json(*r), 0;
  std::printf("deleted pin %s (%s winners, id %s)\n", name.c_str(), (*r)["count"].dump().c_str(),
              r->value("id", "").c_str());
  return 0;
}

}  // namespace ktune::cli
