#include "templates/registry.h"

#include <xxhash.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

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

}  // namespace

std::string xxh3_hex(std::string_view bytes) {
  const XXH64_hash_t h = XXH3_64bits(bytes.data(), bytes.size());
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

Result<std::unique_ptr<KernelTemplate>> TemplateRegistry::load_template(const std::string& path) {
  auto manifest = load_manifest(path);
  if (!manifest) return std::unexpected(manifest.error());
  auto t = std::make_unique<KernelTemplate>();
  t->manifest = std::move(*manifest);
  auto text = read_text(path);
  if (!text) return std::unexpected(text.error());
  t->manifest_text = std::move(*text);
  auto source = read_text(t->manifest.source);
  if (!source) return std::unexpected(source.error());
  t->source = std::move(*source);
  // Hash manifest, source and headers with length prefixes so no two splits collide.
  std::string material;
  auto add = [&](std::string_view part) {
    material += std::to_string(part.size()) + ":";
    material += part;
  };
  add(t->manifest_text);
  add(t->source);
  for (const auto& h : t->manifest.headers) {
    auto htext = read_text(h);
    if (!htext) return std::unexpected(htext.error());
    const std::string include_name = fs::path(h).filename().string();
    add(include_name);
    add(*htext);
    t->headers.emplace_back(include_name, std::move(*htext));
  }
  t->hash = xxh3_hex(material);
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

const KernelTemplate* TemplateRegistry::find(std::string_view name) const {
  for (const auto& t : m_templates)
    if (t->name() == name) return t.get();
  return nullptr;
}

std::vector<const KernelTemplate*> TemplateRegistry::for_problem(const Problem& problem,
                                                                 int cc) const {
  std::vector<const KernelTemplate*> out;
  for (const auto& t : m_templates)
    if (t->manifest.supports(problem, cc)) out.push_back(t.get());
  return out;
}

std::vector<std::string> TemplateRegistry::ops() const {
  std::set<std::string> ops;
  for (const auto& t : m_templates) ops.insert(t->manifest.op);
  return {ops.begin(), ops.end()};
}

}  // namespace ktune
