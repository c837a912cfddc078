// The shipped tables (tables/*.json: tables/h200.json and tables/h100.json, what a fresh node
// serves before it tunes anything) name every template by a hash the shipped template takes as
// its kernel's (same_kernel: the kernel hash, or one its manifest lists under previous_hashes).
// Editing a template's kernel (its source, a header, or its manifest beyond the heuristic rules,
// their rank, k_slices and the description) changes that hash and turns the tables' winners of it
// stale, so such an edit must come with the tables regenerated on their GPUs
// (bench/tables/make_table.sh, bench/gemm_peers), unless it only widens the space and the
// manifest lists the old hash (docs/templates.md). A heuristic edit keeps the hash.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "templates/registry.h"
#include "tests/fakes/daemon_parts.h"

namespace ktune {
namespace {

// Every winner of one table names a shipped template by its kernel hash; returns how many.
size_t check_table(const TemplateRegistry& templates, const std::filesystem::path& path) {
  std::ifstream in(path);
  EXPECT_TRUE(in) << path;
  const auto table = nlohmann::json::parse(in);
  std::map<std::string, std::set<std::string>> stale;  // template -> hashes the table names
  size_t checked = 0;
  for (const auto& w : table.at("winners"))
    for (const auto& r : w.at("ranked")) {
      const std::string name = r.at("template"), hash = r.at("template_hash");
      const KernelTemplate* t = templates.find(name);
      EXPECT_NE(t, nullptr) << path << " names template " << name << ", which is not shipped";
      if (t == nullptr) continue;
      if (!t->same_kernel(hash)) stale[name + " (shipped " + t->hash + ")"].insert(hash);
      ++checked;
    }
  for (const auto& [name, hashes] : stale)
    ADD_FAILURE() << path.filename() << " names " << name << " by " << *hashes.begin()
                  << ": the template was edited after the table was made; regenerate the table "
                     "on its GPU, or undo the edit";
  return checked;
}

TEST(ShippedTableTest, EveryWinnerNamesItsTemplateAsShipped) {
  const TemplateRegistry templates = TemplateRegistry::load({builtin_template_dir()});
  std::map<std::string, size_t> checked;  // table file -> ranked entries checked
  for (const auto& e :
       std::filesystem::directory_iterator(std::string(KTUNE_SOURCE_DIR) + "/tables"))
    if (e.path().extension() == ".json")
      checked[e.path().filename().string()] = check_table(templates, e.path());
  ASSERT_TRUE(checked.contains("h200.json"));
  ASSERT_TRUE(checked.contains("h100.json"));
  for (const auto& [file, n] : checked) EXPECT_GT(n, 50u) << file;
}

}  // namespace
}  // namespace ktune
