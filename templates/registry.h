// TemplateRegistry: the kernel templates this node knows, loaded from the configured directories.
//
// Each <dir>/<name>/<name>.yaml is loaded with its source and headers and hashed twice (XXH3-64):
//  - `hash`, the kernel's: source, headers and the manifest's content less what only chooses or
//    describes a config (`heuristic`, `heuristic_values`, `heuristic_rank`, `k_slices`,
//    `description`, `previous_hashes`, comments, layout). It goes into every cubin key and winner
//    record, so editing what a config compiles to or may be retires what was measured with the old
//    one, and refreshing the heuristics does not.
//  - `content_hash`, of every byte (the manifest as written, source, headers): what a reload
//    compares, and the hash records were written with before 2026-12-06 (kernel hash v1), which
//    still names the same kernel while the manifest is unchanged, or while the manifest lists
//    it under `previous_hashes` (same_kernel()).
// A bad manifest is reported and skipped; the others still load. Immutable after load: share it
// freely between threads.
//
// TemplateSet: the registry a daemon serves, replaced whole when it reloads (SIGHUP). Readers take
// a snapshot at the start of a request, a compile or a tuning job and keep it to the end, so a
// reload never changes the templates under them; an old registry lives until its last snapshot
// is gone. Thread-safe.
#pragma once

#include <algorithm>
#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "templates/manifest.h"

namespace ktune {

struct KernelTemplate {
  Manifest manifest;
  std::string manifest_text;
  std::string source;                                        // the .cuh text
  std::vector<std::pair<std::string, std::string>> headers;  // (include name, text)
  std::string hash;                                          // kernel hash, 16 hex digits
  std::string content_hash;                                  // every byte, 16 hex digits

  const std::string& name() const { return manifest.name; }
  // Whether a record's template hash names this kernel: the kernel hash; the hash of every byte
  // (how records were hashed before 2026-12-06) while no byte has changed since; or a hash the
  // manifest lists under previous_hashes.
  bool same_kernel(std::string_view recorded_hash) const {
    return recorded_hash == hash || recorded_hash == content_hash ||
           std::ranges::find(manifest.previous_hashes, recorded_hash) !=
               manifest.previous_hashes.end();
  }
  // Every hash same_kernel accepts.
  std::vector<std::string> known_hashes() const {
    std::vector<std::string> all{hash, content_hash};
    all.insert(all.end(), manifest.previous_hashes.begin(), manifest.previous_hashes.end());
    return all;
  }
};

// XXH3-64 of the bytes, as 16 lowercase hex digits.
std::string xxh3_hex(std::string_view bytes);

class TemplateRegistry {
 public:
  // Loads every template under `dirs` (missing dirs are errors too). Never fails as a whole:
  // problems are listed in errors().
  static TemplateRegistry load(const std::vector<std::string>& dirs);
  // Loads one template directly from its manifest path.
  static Result<std::unique_ptr<KernelTemplate>> load_template(const std::string& manifest_path);

  const std::vector<std::unique_ptr<KernelTemplate>>& all() const { return m_templates; }
  const KernelTemplate* find(std::string_view name) const;
  // Every template implementing the problem's op, dtypes and layout on compute capability `cc`,
  // highest heuristic_rank for this problem first (equal ranks in registry order).
  std::vector<const KernelTemplate*> for_problem(const Problem& problem, int cc) const;
  // Distinct ops, sorted.
  std::vector<std::string> ops() const;
  // The layout a problem of `op` gets when it names none: the layout the most templates of the op
  // implement, ties going to the first template's first layout. For gemm that is `rc`, the layout
  // of nn.Linear and the only one the Hopper templates (gemm_sm90, gemm_tma) implement, so a
  // lookup that names no layout can be answered by every gemm kernel. "" for an unknown op.
  std::string default_layout(std::string_view op) const;
  // Why no template implements `problem` on compute capability `cc` (any arch when cc < 0),
  // naming what is valid: the ops, the op's layouts, dtypes, dims or arch range. "" when a
  // template implements it.
  std::string why_unsupported(const Problem& problem, int cc) const;
  const std::vector<Error>& errors() const { return m_errors; }

 private:
  std::string joined_ops() const;  // "gemm, layernorm, ..."

  std::vector<std::unique_ptr<KernelTemplate>> m_templates;
  std::vector<Error> m_errors;
};

// What differs between two registries, by template name, each list sorted: a changed template
// has another content hash (any byte of its manifest, source or a header was edited; a heuristic
// edit too, which keeps its kernel hash and its winners).
struct TemplateChanges {
  std::vector<std::string> added, changed, removed;

  bool empty() const { return added.empty() && changed.empty() && removed.empty(); }
};
TemplateChanges compare_templates(const TemplateRegistry& from, const TemplateRegistry& to);

class TemplateSet {
 public:
  using Snapshot = std::shared_ptr<const TemplateRegistry>;

  explicit TemplateSet(TemplateRegistry registry)
      : m_current(std::make_shared<const TemplateRegistry>(std::move(registry))) {}
  // REQUIRES: `registry` is not null.
  explicit TemplateSet(Snapshot registry) : m_current(std::move(registry)) {}

  // The registry served now. Keep the snapshot for as long as anything taken from it is used
  // (a KernelTemplate* included).
  Snapshot current() const { return m_current.load(std::memory_order_acquire); }
  // Serves `next` from now on (REQUIRES: not null); returns the registry it replaced.
  Snapshot replace(Snapshot next) {
    return m_current.exchange(std::move(next), std::memory_order_acq_rel);
  }

 private:
  std::atomic<Snapshot> m_current;
};

}  // namespace ktune
