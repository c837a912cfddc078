// The shipped table (tables/h200.json, what a fresh node serves before it tunes anything) names
// every template by the kernel hash the shipped template has. Editing a template's kernel (its
// source, a header, or its manifest beyond the heuristic rules, their rank and the description)
// changes that hash and turns the table's winners of it stale, so such an edit must come with the
// table regenerated on an H200 (bench/gemm_peers). A heuristic edit keeps the hash.
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "templates/registry.h"
#include "tests/fakes/daemon_parts.h"

namespace ktune {
namespace {

TEST(ShippedTableTest, EveryWinnerNamesItsTemplateAsShipped) {
  const TemplateRegistry templates = TemplateRegistry::load({builtin_template_dir()});
  std::ifstream in(std::string(KTUNE_SOURCE_DIR) + "/tables/h200.json");
  ASSERT_TRUE(in) << "tables/h200.json";
  const auto table = nlohmann::json::parse(in);
  std::map<std::string, std::set<std::string>> stale;  // template -> hashes the table names
  size_t checked = 0;
  for (const auto& w : table.at("winners"))
    for (const auto& r : w.at("ranked")) {
      const std::string name = r.at("template"), hash = r.at("template_hash");
      const KernelTemplate* t = templates.find(name);
      ASSERT_NE(t, nullptr) << "the table names template " << name << ", which is not shipped";
      if (t->hash != hash) stale[name + " (shipped " + t->hash + ")"].insert(hash);
      ++checked;
    }
  EXPECT_GT(checked, 50u);
  for (const auto& [name, hashes] : stale)
    ADD_FAILURE() << "tables/h200.json names " << name << " by " << *hashes.begin()
                  << ": the template was edited after the table was made; regenerate the table "
                     "on an H200, or undo the edit";
}

}  // namespace
}  // namespace ktune
