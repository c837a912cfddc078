// Imports that would poison lookups are refused record by record, with a reason each; a bad
// winner already in the index (an old store) falls back to heuristics; device prefixes resolve
// to the class whose name they spell out.
#include <gtest/gtest.h>

#include "daemon/dispatcher.h"
#include "store/table_io.h"
#include "templates/space.h"
#include "tests/fakes/daemon_parts.h"
#include "tests/fakes/test_records.h"

namespace ktune {
namespace {

using protocol::Json;

const std::string k_h200 = "nvidia-h200.sm90.132sm.140gib";

class ImportCheckTest : public ::testing::Test {
 protected:
  ImportCheckTest() : m_templates(TemplateRegistry::load({builtin_template_dir()})) {
    NodeIdentity node;
    node.driver = "none";
    node.nvrtc = "13.0";
    node.node_id = "test-node";
    node.gpu_error = "no GPU in tests";
    m_parts = std::make_unique<testing::DaemonParts>(default_config(), m_templates, node);
    // The real 4096^3 winner, imported the way every table is.
    Json r = import({valid(4096, 190.0)});
    EXPECT_TRUE(r["ok"].get<bool>()) << r.dump();
  }

  const KernelTemplate& gemm() const { return *m_templates.find("gemm"); }

  // A gemm bf16 rc winner with the heuristic config of the installed template.
  WinnerRecord valid(std::int64_t m, double us) const {
    auto w = testing::winner(
        Problem{"gemm", "bf16", "bf16", "rc", {{"M", m}, {"N", 4096}, {"K", 4096}}}, us);
    w.ranked.resize(1);
    w.ranked[0].template_hash = gemm().hash;
    w.ranked[0].params = *heuristic_config(gemm(), w.problem, DeviceLimits{});
    w.validators.nvrtc = "13.0";
    return w;
  }

  static Json table(const std::vector<WinnerRecord>& records) {
    return Json::parse(render_table(records, TableFormat::json));
  }
  Json import_json(const Json& doc) {
    Json req = {{"v", 1}, {"id", 1}, {"op", "import"}, {"table", doc.dump()}};
    return Json::parse(m_parts->dispatcher.handle(req.dump()).line);
  }
  Json import(const std::vector<WinnerRecord>& records) { return import_json(table(records)); }

  // Imports one record edited as JSON; returns the error message ("" when it was imported).
  std::string rejection(const std::function<void(Json&)>& edit) {
    Json doc = table({valid(4096, 1.0)});
    edit(doc["winners"][0]);
    Json r = import_json(doc);
    if (r["ok"].get<bool>()) return "";
    EXPECT_EQ(r["error"]["code"], "bad_request") << r.dump();
    return r["error"]["message"].get<std::string>();
  }

  Json lookup(const std::string& device, std::int64_t m = 4096) {
    Json req = {{"v", 1},
                {"id", 2},
                {"op", "lookup"},
                {"device", device},
                {"problem",
                 {{"op", "gemm"},
                  {"dtype", "bf16"},
                  {"layout", "rc"},
                  {"dims", {{"M", m}, {"N", 4096}, {"K", 4096}}}}}};
    return Json::parse(m_parts->dispatcher.handle(req.dump()).line);
  }
  // The served 4096^3 answer is still the real winner.
  void expect_real_winner_served() {
    Json r = lookup(k_h200);
    ASSERT_TRUE(r["ok"].get<bool>()) << r.dump();
    EXPECT_EQ(r["result"]["entries"][0]["provenance"], "exact");
    EXPECT_EQ(r["result"]["entries"][0]["median_us"], 190.0);
  }

  TemplateRegistry m_templates;
  std::unique_ptr<testing::DaemonParts> m_parts;
};

// 64-bit values are range-checked, never cut to an int: cc 2^32+90 is not 90.
TEST_F(ImportCheckTest, IntegersAreNotTruncated) {
  std::string why = rejection([](Json& w) { w["device"]["cc"] = (std::int64_t(1) << 32) + 90; });
  EXPECT_NE(why.find("device.cc: 4294967386 is out of range"), std::string::npos) << why;
  why = rejection([](Json& w) { w["trials"] = (std::int64_t(1) << 32) + 5; });
  EXPECT_NE(why.find("trials: 4294967301 is out of range"), std::string::npos) << why;
  why = rejection([](Json& w) { w["ranked"][0]["params"]["STAGES"] = std::uint64_t(1) << 63; });
  EXPECT_NE(why.find("is out of range"), std::string::npos) << why;
  EXPECT_EQ(m_parts->index.device_ids(), std::vector<std::string>{k_h200});
}

}  // namespace
}  // namespace ktune
