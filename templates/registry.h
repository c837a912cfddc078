// TemplateRegistry: the kernel templates this node knows, loaded from the configured directories.
//
// Each <dir>/<name>/<name>.yaml is loaded with its source and headers and hashed (XXH3-64 of the
// manifest, source and headers; the hash goes into every cubin key and winner record, so editing
// a template retires what was measured with the old one). A bad manifest is reported and skipped;
// the others still load. Immutable after load: share it freely between threads.
#pragma once

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
  std::string hash;                                          // 16 hex digits

  const std::string& name() const { return manifest.name; }
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
  // Every template implementing the problem's op, dtypes and layout on compute capability `cc`.
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

}  // namespace ktune
