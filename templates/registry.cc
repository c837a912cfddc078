#include "templates/registry.h"

#include <xxhash.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <sstream>

#include "config/text.h"
#include "templates/space.h"

namespace ktune {
namespace {

namespace fs = std::filesystem;

Result<std::string> read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return fail(ErrorCode::io_error, path + ": cannot read");
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The quoted name of an `#include "name"` line, "" for `#include <name>` (NVRTC's own headers:
// no -I reaches anything else, see manifest.cc), nullopt for a line that is no #include. A
// computed include (`#include MACRO`) gives "#" (it cannot be checked).
std::optional<std::string> quoted_include(std::string_view line) {
  auto skip_space = [&] {
    while (!line.empty() && (line.front() == ' ' || line.front() == '\t')) line.remove_prefix(1);
  };
  skip_space();
  if (!line.starts_with('#')) return std::nullopt;
  line.remove_prefix(1);
  skip_space();
  if (!line.starts_with("include")) return std::nullopt;
  line.remove_prefix(7);
  if (line.starts_with("_next")) return "#";
  if (!line.empty() && line.front() != ' ' && line.front() != '\t' && line.front() != '"' &&
      line.front() != '<')
    return std::nullopt;  // #includeX: another directive
  skip_space();
  if (line.starts_with('<')) return "";
  if (!line.starts_with('"')) return "#";
  const auto end = line.find('"', 1);
  return end == std::string_view::npos ? "#" : std::string(line.substr(1, end - 1));
}

// NVRTC is given the manifest's headers by file name, and resolves any other quoted include from
// the daemon's working directory: text outside the template's hash, so editing it would change
// no cubin key and no stored winner. Every quoted #include must so name a listed header.
Result<void> check_includes(const std::string& file, std::string_view text,
                            const std::set<std::string>& listed, const std::string& manifest) {
  int line_no = 0;
  for (size_t at = 0; at < text.size();) {
    const size_t end = std::min(text.find('\n', at), text.size());
    const std::string_view line = text.substr(at, end - at);
    at = end + 1;
    ++line_no;
    const auto name = quoted_include(line);
    if (!name || name->empty() || listed.count(*name)) continue;
    const std::string where = file + ":" + std::to_string(line_no) + ": ";
    if (*name == "#")
      return fail(ErrorCode::invalid_argument,
                  where +
                      "only #include \"header\" (a header the manifest lists) or #include "
                      "<header> (NVRTC's own) can be checked");
    return fail(ErrorCode::invalid_argument,
                where + "#include \"" + *name + "\" is not one of the headers " + manifest +
                    " lists (NVRTC would read it from outside the template, unhashed)");
  }
  return {};
}

// Appends `part` so that no two splits of the same bytes read alike: its length, ':', the bytes.
void add_part(std::string& out, std::string_view part) {
  out += std::to_string(part.size());
  out += ':';
  out += part;
}

// The manifest keys that only choose or describe a config: outside the kernel hash.
bool outside_kernel_hash(const std::string& key) {
  return key == "heuristic" || key == "heuristic_values" || key == "heuristic_rank" ||
         key == "description" || key == "previous_hashes" || key == "k_slices";
}

// A YAML node's content in one form whatever its layout or comments: maps in document order,
// every scalar with its kind (a quoted "1" is not a plain 1; yaml-cpp's own tag text only for an
// explicit tag, which no manifest needs), length-prefixed.
void add_canonical(std::string& out, const YAML::Node& n, bool top = false) {
  switch (n.Type()) {
    case YAML::NodeType::Map:
      out += '{';
      for (const auto& kv : n) {
        if (top && kv.first.IsScalar() && outside_kernel_hash(kv.first.Scalar())) continue;
        add_canonical(out, kv.first);
        add_canonical(out, kv.second);
      }
      out += '}';
      return;
    case YAML::NodeType::Sequence:
      out += '[';
      for (const auto& item : n) add_canonical(out, item);
      out += ']';
      return;
    case YAML::NodeType::Scalar:
      if (n.Tag() == "?")
        out += 'p';  // plain
      else if (n.Tag() == "!")
        out += 'q';  // quoted
      else
        add_part(out, n.Tag());
      add_part(out, n.Scalar());
      return;
    case YAML::NodeType::Null:
    case YAML::NodeType::Undefined:
      out += '~';
      return;
  }
}

}  // namespace

std::string xxh3_hex(std::string_view bytes) {
  const XXH64_hash_t h = XXH3_64bits(bytes.data(), bytes.size());
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

Result<std::unique_ptr<KernelTemplate>> TemplateRegistry::load_template(const std::string& path) {
  // Read once: what is parsed is what is hashed, even if the file is saved meanwhile.
  auto text = read_text(path);
  if (!text) return std::unexpected(text.error());
  YAML::Node document;
  auto manifest = load_manifest(path, *text, &document);
  if (!manifest) return std::unexpected(manifest.error());
  auto t = std::make_unique<KernelTemplate>();
  t->manifest = std::move(*manifest);
  t->manifest_text = std::move(*text);
  auto source = read_text(t->manifest.source);
  if (!source) return std::unexpected(source.error());
  t->source = std::move(*source);
  // Two hashes (registry.h): `content` of every byte, `kernel` of the manifest's content less
  // what only chooses or describes a config. Source and headers go into both.
  std::string content, kernel;
  add_part(content, t->manifest_text);
  add_canonical(kernel, document, true);
  auto add = [&](std::string_view part) {
    add_part(content, part);
    add_part(kernel, part);
  };
  add(t->source);
  std::set<std::string> listed;  // the names NVRTC gets the headers by
  for (const auto& h : t->manifest.headers) {
    auto htext = read_text(h);
    if (!htext) return std::unexpected(htext.error());
    const std::string include_name = fs::path(h).filename().string();
    if (!listed.insert(include_name).second)
      return fail(ErrorCode::invalid_argument, path + ": headers: two headers named " +
                                                   include_name +
                                                   " (NVRTC is given them by file name)");
    add(include_name);
    add(*htext);
    t->headers.emplace_back(include_name, std::move(*htext));
  }
  if (auto ok = check_includes(t->manifest.source, t->source, listed, path); !ok)
    return std::unexpected(ok.error());
  for (size_t i = 0; i < t->headers.size(); ++i)
    if (auto ok = check_includes(t->manifest.headers[i], t->headers[i].second, listed, path); !ok)
      return std::unexpected(ok.error());
  t->hash = xxh3_hex(kernel);
  t->content_hash = xxh3_hex(content);
  return t;
}

TemplateRegistry TemplateRegistry::load(const std::vector<std::string>& dirs) {
  TemplateRegistry reg;
  std::set<std::string> names;
  for (const auto& dir : dirs) {
    std::error_code ec;
    if (!fs::is_directory(dir, ec)) {
      reg.m_errors.push_back({ErrorCode::not_found, dir + ": template directory does not exist"});
      continue;
    }
    std::vector<fs::path> manifests;
    for (const auto& entry : fs::directory_iterator(dir, ec)) {
      if (!entry.is_directory()) continue;
      const fs::path m = entry.path() / (entry.path().filename().string() + ".yaml");
      if (fs::is_regular_file(m, ec)) manifests.push_back(m);
    }
    std::sort(manifests.begin(), manifests.end());
    for (const auto& m : manifests) {
      auto t = load_template(m.string());
      if (!t) {
        reg.m_errors.push_back(t.error());
        continue;
      }
      if (!names.insert((*t)->name()).second) {
        reg.m_errors.push_back({ErrorCode::already_exists,
                                m.string() + ": a template named '" + (*t)->name() +
                                    "' was already loaded from an earlier directory; skipped"});
        continue;
      }
      reg.m_templates.push_back(std::move(*t));
    }
  }
  return reg;
}

TemplateChanges compare_templates(const TemplateRegistry& from, const TemplateRegistry& to) {
  TemplateChanges changes;
  for (const auto& t : to.all()) {
    const KernelTemplate* old = from.find(t->name());
    if (!old)
      changes.added.push_back(t->name());
    else if (old->content_hash != t->content_hash)
      changes.changed.push_back(t->name());
  }
  for (const auto& t : from.all())
    if (!to.find(t->name())) changes.removed.push_back(t->name());
  for (auto* list : {&changes.added, &changes.changed, &changes.removed})
    std::sort(list->begin(), list->end());
  return changes;
}

const KernelTemplate* TemplateRegistry::find(std::string_view name) const {
  for (const auto& t : m_templates)
    if (t->name() == name) return t.get();
  return nullptr;
}

std::vector<const KernelTemplate*> TemplateRegistry::for_problem(const Problem& problem,
                                                                 int cc) const {
  std::vector<std::pair<double, const KernelTemplate*>> ranked;
  for (const auto& t : m_templates)
    if (t->manifest.supports(problem, cc)) ranked.emplace_back(heuristic_rank(*t, problem), t.get());
  std::stable_sort(ranked.begin(), ranked.end(),
                   [](const auto& a, const auto& b) { return a.first > b.first; });
  std::vector<const KernelTemplate*> out;
  for (const auto& [_, t] : ranked) out.push_back(t);
  return out;
}

std::string TemplateRegistry::joined_ops() const {
  return joined(ops());
}

std::vector<std::string> TemplateRegistry::ops() const {
  std::set<std::string> ops;
  for (const auto& t : m_templates) ops.insert(t->manifest.op);
  return {ops.begin(), ops.end()};
}

std::string TemplateRegistry::default_layout(std::string_view op) const {
  std::map<std::string, int> count;
  std::string first;
  for (const auto& t : m_templates) {
    if (t->manifest.op != op) continue;
    if (first.empty()) first = t->manifest.default_layout;
    for (const auto& [layout, _] : t->manifest.layouts) ++count[layout];
  }
  std::string best = first;
  for (const auto& [layout, n] : count)
    if (n > count[best]) best = layout;
  return best;
}

namespace {


}  // namespace

std::string TemplateRegistry::why_unsupported(const Problem& p, int cc) const {
  std::vector<const Manifest*> of_op;
  for (const auto& t : m_templates)
    if (t->manifest.op == p.op) of_op.push_back(&t->manifest);
  if (of_op.empty()) return "unknown op '" + p.op + "' (ops: " + joined_ops() + ")";
  // Each property in turn, over the templates of the op that passed the ones before.
  std::set<std::string> layouts, dtypes, out_dtypes, dims;
  for (const Manifest* m : of_op)
    for (const auto& [l, _] : m->layouts) layouts.insert(l);
  std::erase_if(of_op, [&](const Manifest* m) { return !m->layouts.count(p.layout); });
  if (of_op.empty())
    return p.op + " has no layout '" + p.layout + "' (layouts: " + joined(layouts) + ")";
  for (const Manifest* m : of_op) dtypes.insert(m->dtypes.begin(), m->dtypes.end());
  std::erase_if(of_op, [&](const Manifest* m) {
    return std::find(m->dtypes.begin(), m->dtypes.end(), p.dtype) == m->dtypes.end();
  });
  if (of_op.empty())
    return p.op + " layout " + p.layout + " has no dtype '" + p.dtype +
           "' (dtypes: " + joined(dtypes) + ")";
  for (const Manifest* m : of_op) {
    if (m->out_dtypes.empty()) out_dtypes.insert(p.dtype);
    out_dtypes.insert(m->out_dtypes.begin(), m->out_dtypes.end());
  }
  std::erase_if(of_op, [&](const Manifest* m) {
    return m->out_dtypes.empty() ? p.out_dtype != p.dtype
                                 : std::find(m->out_dtypes.begin(), m->out_dtypes.end(),
                                             p.out_dtype) == m->out_dtypes.end();
  });
  if (of_op.empty())
    return p.op + " " + p.dtype + " has no out_dtype '" + p.out_dtype +
           "' (out_dtypes: " + joined(out_dtypes) + ")";
  const std::string want = joined(of_op.front()->dims);
  std::erase_if(of_op,
                [&](const Manifest* m) { return !m->supports(p, cc >= 0 ? cc : m->min_cc); });
  if (of_op.empty()) return p.op + " takes dims " + want;
  if (cc < 0) return "";
  std::string arches;
  for (const Manifest* m : of_op) {
    if (m->supports(p, cc)) return "";
    arches += std::string(arches.empty() ? "" : ", ") + m->name + " sm_" +
              std::to_string(m->min_cc) + (m->max_cc ? "-" + std::to_string(m->max_cc) : "+");
  }
  return "no template implements " + p.describe() + " on sm_" + std::to_string(cc) + " (" + arches +
         ")";
}

}  // namespace ktune
