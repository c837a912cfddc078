// Shared by the fuzz targets (tests/fuzz/fuzz_*.cc): a daemon's request-handling parts over a
// MemStore, with the built-in templates and two real winners, and the checks every reply must
// pass. A failed check aborts, which libFuzzer (and the corpus replay) reports as a crash.
//
// The targets are built twice: with clang's libFuzzer under ASan+UBSan (cmake -DKTUNE_FUZZ=ON),
// and with the normal compiler plus replay_main.cc, which runs the committed corpus as a ctest.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "config/log.h"
#include "store/records.h"
#include "templates/space.h"
#include "tests/fakes/daemon_parts.h"
#include "tests/fakes/test_records.h"

namespace ktune::fuzz {

using protocol::Json;

[[noreturn]] inline void violated(std::string_view what, std::string_view detail) {
  std::fprintf(stderr, "fuzz check failed: %.*s\n%.*s\n", int(what.size()), what.data(),
               int(std::min<size_t>(detail.size(), 4000)), detail.data());
  std::abort();
}

inline const TemplateRegistry& templates() {
  static const TemplateRegistry registry = [] {
    log_setup(LogLevel::off, LogFormat::text);  // millions of imports: keep stderr for findings
    return TemplateRegistry::load({builtin_template_dir()});
  }();
  return registry;
}

// The two tuned H200 gemm shapes every input starts from (4096^3 and 16x4096x4096, measured
// with the installed template), so lookups can be exact, nearest, stale or heuristic.
inline const std::vector<WinnerRecord>& seed_winners() {
  static const std::vector<WinnerRecord> winners = [] {
    const KernelTemplate* gemm = templates().find("gemm");
    std::vector<WinnerRecord> out;
    for (auto [m, us] : {std::pair{4096, 190.0}, std::pair{16, 22.0}}) {
      auto w = testing::winner(
          Problem{"gemm", "bf16", "bf16", "rc", {{"M", m}, {"N", 4096}, {"K", 4096}}}, us);
      w.ranked.resize(1);
      w.ranked[0].template_hash = gemm->hash;
      w.ranked[0].params = *heuristic_config(*gemm, w.problem, DeviceLimits{});
      w.validators.nvrtc = "13.0";
      out.push_back(std::move(w));
    }
    return out;
  }();
  return winners;
}

// The objects a dispatcher works with, as a node without a GPU holding seed_winners(). Fresh per
// input, so every input replays alone; the seed records are encoded once (what Catalog::load
// would read back is what the index is loaded with).
inline std::unique_ptr<testing::DaemonParts> make_parts() {
  static const NodeIdentity node = [] {
    NodeIdentity n;
    n.driver = "none";
    n.nvrtc = "13.0";
    n.node_id = "fuzz-node";
    n.gpu_error = "no GPU when fuzzing";
    return n;
  }();
  static const std::vector<std::pair<std::string, std::string>> encoded = [] {
    std::vector<std::pair<std::string, std::string>> out;
    for (const auto& w : seed_winners()) out.emplace_back(w.key(), encode(w));
    return out;
  }();
  static const DaemonConfig config = default_config();
  auto parts = std::make_unique<testing::DaemonParts>(config, templates(), node);
  WriteBatch batch;
  for (const auto& [key, value] : encoded) batch.put(Table::winners, key, value);
  if (!parts->store.write(batch, Durability::sync)) violated("setup", "store write");
  parts->index.load(seed_winners());
  return parts;
}

// Every reply line is one JSON object {"v":V,"id":..,"ok":bool,...} in valid UTF-8, V a version
// the daemon speaks (the request's, or 1 when it could not be read); a failure
// names a protocol error code, never "internal" (bad input is the client's error, not a bug of
// ours: with a MemStore nothing else can fail). Returns the number of lines.
inline size_t check_replies(std::string_view out) {
  size_t lines = 0, start = 0;
  for (size_t nl; (nl = out.find('\n', start)) != std::string_view::npos; start = nl + 1) {
    const std::string_view line = out.substr(start, nl - start);
    ++lines;
    Json j = Json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded() || !j.is_object()) violated("reply is not a JSON object", line);
    const int v = j.value("v", 0);
    if (v < protocol::k_min_version || v > protocol::k_version || !j.contains("id") ||
        !j.contains("ok") || !j["ok"].is_boolean())
      violated("reply lacks v/id/ok", line);
    if (j["ok"].get<bool>()) {
      if (!j.contains("result") && !j.contains("event")) violated("ok reply has no result", line);
      continue;
    }
    const Json& e = j.value("error", Json::object());
    const std::string code = e.value("code", "");
    if (code.empty() || !e.contains("message") || !e["message"].is_string())
      violated("error reply lacks code/message", line);
    if (protocol::error_kind_from(code) == protocol::ErrorKind::internal)
      violated("bad input answered as an internal error", line);
  }
  if (start != out.size()) violated("reply output does not end with a newline", out.substr(start));
  return lines;
}

}  // namespace ktune::fuzz
