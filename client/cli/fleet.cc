// The CLI's fleet command: `ktune fleet status` — this node's link to the fleet's Redis and what
// the fleet looks like from it (docs/operations.md § Fleet).
#include <cstdio>

#include "client/cli/commands.h"
#include "client/cli/output.h"

namespace ktune::cli {

using protocol::Json;

namespace {

std::string number(const Json& j, const char* key) {
  return j.contains(key) ? j[key].dump() : "0";
}

void print_nodes(const Json& nodes) {
  std::printf("  nodes        %zu seen\n", nodes.size());
  for (const auto& n : nodes)
    std::printf("    %-20s %s, seen %.1f s ago, %s winners, tuned %s, claims %s, lag p50 %.1f ms\n",
                n.value("name", "?").c_str(), n.value("stopped", false) ? "stopped" : "running",
                n.value("seen_s_ago", 0.0), number(n, "winners").c_str(),
                number(n, "tuned").c_str(), number(n, "claims").c_str(),
                n.value("lag_p50_ms", 0.0));
}

}  // namespace

int cmd_fleet_status(const Common& c) {
  Client client(c.client_options());
  auto r = client.call("fleet");
  if (!r) return report_error(c.json, r.error());
  if (c.json) return print_json(*r), 0;
  const Json& j = *r;
  if (!j.value("enabled", false)) {
    std::printf("%s\n", j.value("message", "no fleet").c_str());
    return 0;
  }
  const bool up = j.value("connected", false);
  std::printf("fleet %s (%s), node %s\n", j["redis"].get<std::string>().c_str(),
              j["namespace"].get<std::string>().c_str(), j["node"].get<std::string>().c_str());
  if (up)
    std::printf("  redis        connected for %.1f s\n", j.value("connected_for_s", 0.0));
  else
    std::printf("  redis        UNREACHABLE for %.1f s: %s (serving and tuning alone)\n",
                j.value("unreachable_for_s", 0.0), j.value("error", "").c_str());
  if (j.contains("nodes")) print_nodes(j["nodes"]);
  if (j.contains("keys_tuned"))
    std::printf("  keys tuned   %s in the fleet's table\n", number(j, "keys_tuned").c_str());
  if (j.contains("fleet_error"))
    std::printf("  fleet        not read: %s\n", j["fleet_error"].get<std::string>().c_str());
  std::printf("  this node    tuned %s, published %s, merged %s of %s received, fenced %s\n",
              number(j, "tuned").c_str(), number(j, "published").c_str(),
              number(j, "merged").c_str(), number(j, "received").c_str(),
              number(j, "fenced").c_str());
  const Json& cl = j["claims"];
  std::printf(
      "  claims       %zu held here (%s fleet-wide); %s acquired, %s waited, %s done by "
      "the fleet, %s alone, %s lost\n",
      j["claims_held"].size(), number(j, "fleet_claims_held").c_str(),
      number(cl, "acquired").c_str(), number(cl, "waited").c_str(),
      number(cl, "done_by_fleet").c_str(), number(cl, "alone").c_str(), number(cl, "lost").c_str());
  for (const auto& k : j["claims_held"]) std::printf("    %s\n", k.get<std::string>().c_str());
  const Json& lag = j["lag_ms"];
  std::printf("  lag          p50 %.1f ms, p99 %.1f ms, last %.1f ms over %s winners received\n",
              lag.value("p50", 0.0), lag.value("p99", 0.0), lag.value("last", 0.0),
              number(lag, "count").c_str());
  return 0;
}

}  // namespace ktune::cli
