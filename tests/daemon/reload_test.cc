// SIGHUP's reload (daemon.h reload()) over the dispatcher's parts: no sockets, no process. The
// template directory is a copy the tests edit: a changed template, a new one, a removed one, a
// manifest that does not parse. Label "unit".
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "daemon/daemon.h"
#include "store/table_io.h"
#include "templates/space.h"
#include "tests/fakes/daemon_parts.h"
#include "tests/fakes/test_records.h"

namespace ktune {
namespace {

namespace fs = std::filesystem;
using protocol::Json;

const Problem k_softmax{"softmax", "bf16", "bf16", "", {{"rows", 4096}, {"cols", 4096}}};
const std::string k_lookup =
    R"({"v":1,"id":1,"op":"lookup","device":"nvidia-h200","problem":{"op":"softmax","dtype":"bf16","dims":{"rows":4096,"cols":4096}}})";

// A template directory holding softmax (and the common headers) copied from the source tree.
void copy_template(const std::string& dir, const std::string& name) {
  fs::copy(std::string(KTUNE_SOURCE_DIR) + "/templates/" + name, dir + "/" + name,
           fs::copy_options::recursive);
}

// softmax again, as a second template of the op named `name`.
void add_softmax_copy(const std::string& dir, const std::string& name) {
  fs::create_directories(dir + "/" + name);
  fs::copy(dir + "/softmax/softmax.cuh", dir + "/" + name + "/softmax.cuh");
  std::string manifest = testing::read_file(dir + "/softmax/softmax.yaml");
  manifest.replace(manifest.find("name: softmax"), 13, "name: " + name);
  std::ofstream(dir + "/" + name + "/" + name + ".yaml") << manifest;
}

class ReloadTest : public ::testing::Test {
 protected:
  ReloadTest() {
    copy_template(m_dir.path(), "softmax");
    copy_template(m_dir.path(), "common");
    add_softmax_copy(m_dir.path(), "softmax_b");
    m_templates = TemplateRegistry::load({m_dir.path()});
    EXPECT_TRUE(m_templates.errors().empty());
    DaemonConfig config = default_config();
    config.template_dirs = {m_dir.path()};
    config.seed_tables = {};
    NodeIdentity node;
    node.driver = "none";
    node.nvrtc = "13.0";
    node.node_id = "test-node";
    node.gpu_error = "no GPU in tests";
    m_parts = std::make_unique<testing::DaemonParts>(config, m_templates, node);
    // A softmax winner measured with each template as installed now.
    for (const char* name : {"softmax", "softmax_b"}) {
      WinnerRecord w = testing::winner(testing::gemm_problem(8, 8, 8), 10.0);
      w.problem = k_softmax;
      w.problem.dims.front().second = name == std::string("softmax") ? 4096 : 2048;
      const KernelTemplate* t = m_templates.find(name);
      w.ranked.resize(1);
      w.ranked[0].template_name = name;
      w.ranked[0].template_hash = t->hash;
      w.ranked[0].params = *heuristic_config(*t, w.problem, DeviceLimits{});
      w.ranked[0].tflops = 0;
      EXPECT_TRUE(put_winner(m_parts->store, w));
    }
    EXPECT_TRUE(m_parts->catalog.load());
  }

  Json ok(const std::string& line) {
    Json j = Json::parse(m_parts->dispatcher.handle(line).line);
    EXPECT_TRUE(j["ok"].get<bool>()) << j.dump();
    return j["result"];
  }
  // name -> hash, as the templates op lists them.
  std::map<std::string, std::string> listed() {
    std::map<std::string, std::string> out;
    const Json reply = ok(R"({"v":1,"id":2,"op":"templates"})");
    for (const auto& t : reply["templates"]) out[t["name"]] = t["hash"];
    return out;
  }
  void reload() { ktune::reload(m_parts->config, m_parts->catalog, m_parts->metrics); }
  std::string dir(const std::string& leaf) const { return m_dir / leaf; }

  testing::TempDir m_dir;
  TemplateRegistry m_templates;
  std::unique_ptr<testing::DaemonParts> m_parts;
};

TEST_F(ReloadTest, ChangedAndAddedTemplatesAreServedAndTheChangedOnesWinnersAreStale) {
  Json before = ok(k_lookup);
  ASSERT_EQ(before["entries"][0]["provenance"], "exact");
  const std::string old_hash = m_templates.find("softmax")->hash;
  // A request, compile or job that started before the reload holds this snapshot.
  const TemplateSet::Snapshot held = m_parts->catalog.templates();

  std::ofstream(dir("softmax/softmax.cuh"), std::ios::app) << "\n// edited\n";
  add_softmax_copy(m_dir.path(), "softmax_c");
  reload();

  const auto now = listed();
  ASSERT_EQ(now.size(), 3u);
  EXPECT_NE(now.at("softmax"), old_hash);
  EXPECT_EQ(now.at("softmax_b"), m_templates.find("softmax_b")->hash);
  EXPECT_TRUE(now.contains("softmax_c"));
  // The cached exact answer is gone: the winner is stale now, the new template is offered.
  Json after = ok(k_lookup);
  ASSERT_GE(after["entries"].size(), 2u);
  EXPECT_EQ(after["entries"][0]["provenance"], "stale");
  EXPECT_NE(after["entries"][0]["from"].get<std::string>().find("template softmax changed"),
            std::string::npos)
      << after.dump();
  // Every template is offered (the stale and nearest entries carry configs of softmax and
  // softmax_b; the new one answers with its heuristic).
  std::set<std::string> offered;
  for (const auto& e : after["entries"]) {
    offered.insert(e["template"].get<std::string>());
    if (e["template"] == "softmax_c") {
      EXPECT_EQ(e["provenance"], "heuristic");
      EXPECT_EQ(e["template_hash"], now.at("softmax_c"));
    }
  }
  EXPECT_EQ(offered, (std::set<std::string>{"softmax", "softmax_b", "softmax_c"})) << after.dump();
  // softmax_b did not change: its winner is still exact.
  Json b = ok(
      R"({"v":1,"id":3,"op":"lookup","device":"nvidia-h200","problem":{"op":"softmax","dtype":"bf16","dims":{"rows":2048,"cols":4096}}})");
  EXPECT_EQ(b["entries"][0]["provenance"], "exact");
  EXPECT_EQ(b["entries"][0]["template"], "softmax_b");
  // What held the old snapshot still sees the old templates, whole.
  EXPECT_EQ(held->find("softmax")->hash, old_hash);
  EXPECT_EQ(held->find("softmax_c"), nullptr);

  Json status = ok(R"({"v":1,"id":4,"op":"status"})");
  EXPECT_EQ(status["templates"], 3);
  EXPECT_EQ(status["reloads"]["ok"], 1);
  EXPECT_EQ(status["reloads"]["failed"], 0);
  EXPECT_NE(m_parts->metrics.prometheus().find("ktune_reloads_total{result=\"ok\"} 1\n"),
            std::string::npos);
}

TEST_F(ReloadTest, ARemovedTemplateIsNoLongerOffered) {
  Json b_line = ok(
      R"({"v":1,"id":3,"op":"lookup","device":"nvidia-h200","problem":{"op":"softmax","dtype":"bf16","dims":{"rows":2048,"cols":4096}}})");
  ASSERT_EQ(b_line["entries"][0]["template"], "softmax_b");
  fs::remove_all(dir("softmax_b"));
  reload();
  EXPECT_EQ(listed().size(), 1u);
  // Its winner is no exact answer any more, and neither it nor its heuristic is offered.
  Json after = ok(
      R"({"v":1,"id":3,"op":"lookup","device":"nvidia-h200","problem":{"op":"softmax","dtype":"bf16","dims":{"rows":2048,"cols":4096}}})");
  ASSERT_FALSE(after["entries"].empty());
  for (const auto& e : after["entries"]) {
    EXPECT_NE(e["template"], "softmax_b") << after.dump();
    EXPECT_NE(e["provenance"], "exact") << after.dump();
  }
  // A table naming it no longer imports.
  Problem p = k_softmax;
  p.dims.front().second = 2048;
  const auto stored = m_parts->catalog.index().exact(testing::h200().id(), p);
  ASSERT_TRUE(stored);
  auto why = m_parts->catalog.check_record(*stored);
  ASSERT_FALSE(why);
  EXPECT_NE(why.error().message.find("'softmax_b' is not installed here"), std::string::npos)
      << why.error().message;
}

TEST_F(ReloadTest, AManifestThatDoesNotLoadKeepsEveryLoadedTemplate) {
  ASSERT_EQ(ok(k_lookup)["entries"][0]["provenance"], "exact");
  const auto before = listed();
  // One good change and one broken manifest in the same reload: neither is applied.
  std::ofstream(dir("softmax/softmax.cuh"), std::ios::app) << "\n// edited\n";
  add_softmax_copy(m_dir.path(), "softmax_c");
  fs::create_directories(dir("broken"));
  std::ofstream(dir("broken/broken.yaml")) << "name: broken\nop: [unclosed\n";
  const TemplateSet::Snapshot loaded = m_parts->catalog.templates();
  reload();

  EXPECT_EQ(m_parts->catalog.templates(), loaded) << "the very same registry";
  EXPECT_EQ(listed(), before);
  EXPECT_EQ(ok(k_lookup)["entries"][0]["provenance"], "exact");
  Json status = ok(R"({"v":1,"id":4,"op":"status"})");
  EXPECT_EQ(status["reloads"]["failed"], 1);
  EXPECT_EQ(status["reloads"]["ok"], 0);
  // The refusal names the file and line.
  auto refused = m_parts->catalog.replace_templates(TemplateRegistry::load({m_dir.path()}));
  ASSERT_FALSE(refused);
  EXPECT_NE(refused.error().message.find("broken/broken.yaml:"), std::string::npos)
      << refused.error().message;

  // Fixed, the next reload applies both changes.
  fs::remove_all(dir("broken"));
  reload();
  EXPECT_EQ(listed().size(), 3u);
  EXPECT_EQ(ok(k_lookup)["entries"][0]["provenance"], "stale");
  EXPECT_EQ(ok(R"({"v":1,"id":4,"op":"status"})")["reloads"]["ok"], 1);
}

// A seed table and the new template it was tuned with, deployed together: one reload serves
// both (templates are swapped before the tables merge, or the table would be refused).
TEST_F(ReloadTest, ASeedTableDeployedWithANewTemplateMergesInTheSameReload) {
  add_softmax_copy(m_dir.path(), "softmax_c");
  auto added = TemplateRegistry::load_template(dir("softmax_c/softmax_c.yaml"));
  ASSERT_TRUE(added);
  WinnerRecord w = testing::winner(testing::gemm_problem(8, 8, 8), 7.0);
  w.problem = k_softmax;
  w.problem.dims.front().second = 512;
  w.ranked.resize(1);
  w.ranked[0].template_name = "softmax_c";
  w.ranked[0].template_hash = (*added)->hash;
  w.ranked[0].params = *heuristic_config(**added, w.problem, DeviceLimits{});
  w.ranked[0].tflops = 0;
  std::ofstream(dir("seed.json")) << render_table({w}, TableFormat::json);
  m_parts->config.seed_tables = {dir("seed.json")};
  reload();
  Json r = ok(
      R"({"v":1,"id":5,"op":"lookup","device":"nvidia-h200","problem":{"op":"softmax","dtype":"bf16","dims":{"rows":512,"cols":4096}}})");
  EXPECT_EQ(r["entries"][0]["provenance"], "exact") << r.dump();
  EXPECT_EQ(r["entries"][0]["template"], "softmax_c");
  EXPECT_EQ(ok(R"({"v":1,"id":4,"op":"status"})")["reloads"]["ok"], 1);
}

// Replaces the first `from` in the file with `to`; the test fails if there is none.
void edit(const std::string& path, const std::string& from, const std::string& to) {
  std::string text = testing::read_file(path);
  const size_t at = text.find(from);
  ASSERT_NE(at, std::string::npos) << path << " has no " << from;
  text.replace(at, from.size(), to);
  std::ofstream(path, std::ios::trunc) << text;
}

TEST_F(ReloadTest, AHeuristicEditIsServedAndKeepsTheWinnersMeasuredBeforeIt) {
  const KernelTemplate* before = m_templates.find("softmax");
  ASSERT_EQ(ok(k_lookup)["entries"][0]["provenance"], "exact");
  // The rule a 4096-column bf16 row gets, its description and a comment: none is the kernel.
  const std::string rule = "{THREADS: 256, ROWS_PER_BLOCK: 2, VEC: 8, MODE: 0, UNROLL: 1}";
  const std::string edited = "{THREADS: 128, ROWS_PER_BLOCK: 4, VEC: 8, MODE: 0, UNROLL: 1}";
  edit(dir("softmax/softmax.yaml"), rule, edited);
  edit(dir("softmax/softmax.yaml"), "description: >-",
       "# refreshed from a tuning run\ndescription: >-\n  Edited.");
  reload();

  const KernelTemplate* after = m_parts->catalog.templates()->find("softmax");
  EXPECT_EQ(after->hash, before->hash);
  EXPECT_NE(after->content_hash, before->content_hash);
  EXPECT_EQ(ok(R"({"v":1,"id":4,"op":"status"})")["reloads"]["ok"], 1) << "a changed template";
  // The winner measured before the edit is served as it was.
  Json exact = ok(k_lookup);
  EXPECT_EQ(exact["entries"][0]["provenance"], "exact") << exact.dump();
  EXPECT_EQ(exact["entries"][0]["template_hash"], before->hash);
  // A shape nobody measured gets the new rule (the cached answers were dropped).
  Json fresh = ok(
      R"({"v":1,"id":5,"op":"lookup","device":"nvidia-h200","problem":{"op":"softmax","dtype":"bf16","dims":{"rows":1024,"cols":4096}}})");
  bool served = false;
  for (const auto& e : fresh["entries"])
    if (e["template"] == "softmax" && e["provenance"] == "heuristic") {
      served = true;
      EXPECT_EQ(e["params"]["THREADS"], 128) << e.dump();
      EXPECT_EQ(e["params"]["ROWS_PER_BLOCK"], 4) << e.dump();
    }
  EXPECT_TRUE(served) << fresh.dump();
}

TEST_F(ReloadTest, ARecordHashedTheOldWayIsExactUntilItsManifestChanges) {
  // Before 2026-12-06 a record carried the hash of every byte (content_hash now).
  const KernelTemplate* t = m_templates.find("softmax");
  ASSERT_NE(t->content_hash, t->hash);
  auto stored = get_winner(m_parts->store, testing::h200(), k_softmax);
  ASSERT_TRUE(stored && *stored);
  WinnerRecord w = **stored;
  w.ranked[0].template_hash = t->content_hash;
  ASSERT_TRUE(put_winner(m_parts->store, w));
  ASSERT_TRUE(m_parts->catalog.load());
  Json j = ok(k_lookup);
  EXPECT_EQ(j["entries"][0]["provenance"], "exact") << j.dump();
  // Any byte of the manifest changed: that hash names no kernel here any more...
  std::ofstream(dir("softmax/softmax.yaml"), std::ios::app) << "\n# edited\n";
  reload();
  j = ok(k_lookup);
  EXPECT_EQ(j["entries"][0]["provenance"], "stale") << j.dump();
  // ... unless the manifest lists it among the kernel's previous hashes.
  edit(dir("softmax/softmax.yaml"), "previous_hashes: [",
       "previous_hashes: [" + t->content_hash + ", ");
  reload();
  j = ok(k_lookup);
  EXPECT_EQ(j["entries"][0]["provenance"], "exact") << j.dump();
}

TEST_F(ReloadTest, AnUnchangedDirectoryKeepsTheRegistryAndTheCachedAnswers) {
  ok(k_lookup);
  const auto generation = m_parts->index.generation();
  const TemplateSet::Snapshot loaded = m_parts->catalog.templates();
  auto changes = m_parts->catalog.replace_templates(TemplateRegistry::load({m_dir.path()}));
  ASSERT_TRUE(changes);
  EXPECT_TRUE(changes->empty());
  EXPECT_EQ(m_parts->catalog.templates(), loaded);
  EXPECT_EQ(m_parts->index.generation(), generation) << "nothing to invalidate";
}

TEST(TemplateChangesTest, ListsAddedChangedAndRemovedByName) {
  testing::TempDir a, b;
  for (const auto* d : {&a, &b}) {
    copy_template(d->path(), "softmax");
    copy_template(d->path(), "rmsnorm");
    copy_template(d->path(), "common");
  }
  copy_template(a.path(), "transpose");
  copy_template(b.path(), "layernorm");
  std::ofstream(b / "rmsnorm/rmsnorm.yaml", std::ios::app) << "\n# edited\n";
  const auto from = TemplateRegistry::load({a.path()});
  const auto to = TemplateRegistry::load({b.path()});
  const TemplateChanges c = compare_templates(from, to);
  EXPECT_EQ(c.added, std::vector<std::string>{"layernorm"});
  EXPECT_EQ(c.changed, std::vector<std::string>{"rmsnorm"});
  EXPECT_EQ(c.removed, std::vector<std::string>{"transpose"});
  EXPECT_TRUE(compare_templates(to, to).empty());
}

}  // namespace
}  // namespace ktune
