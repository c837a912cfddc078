// /report (daemon/report_page.h): the page of a daemon over a MemStore, no sockets.
#include "daemon/report_page.h"

#include <gtest/gtest.h>

#include "store/table_io.h"
#include "tests/fakes/daemon_parts.h"
#include "tests/fakes/test_records.h"

namespace ktune {
namespace {

size_t count(const std::string& text, const std::string& needle) {
  size_t n = 0;
  for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) ++n;
  return n;
}

TEST(ReportPageTest, DrawsTheStoresWinnersTrialsAndMisses) {
  const TemplateRegistry templates = TemplateRegistry::load({builtin_template_dir()});
  NodeIdentity node;
  node.node_id = "report-node";
  node.gpu_error = "no GPU in tests";
  testing::DaemonParts parts(default_config(), templates, node);
  const Problem tuned = testing::gemm_problem(4096, 4096, 4096);
  // Through the catalog, as an import: the store and the in-memory index both hold it.
  ASSERT_TRUE(
      parts.catalog.import(render_table({testing::winner(tuned, 250)}, TableFormat::json), "test"));
  // Six trials of the tuned problem over 2 x 2 tiles (one tile failed only), and one in flight.
  WriteBatch batch;
  const std::int64_t tiles[][2] = {{64, 64},   {64, 128}, {128, 64},
                                   {128, 128}, {64, 64},  {128, 128}};
  for (int i = 0; i < 7; ++i) {
    TrialRecord t;
    t.device = testing::h200();
    t.problem = tuned;
    t.template_name = "gemm";
    t.params = {
        {"BLOCK_M", tiles[i % 6][0]}, {"BLOCK_N", tiles[i % 6][1]}, {"STAGES", 3}, {"GROUP_M", i}};
    t.outcome = i == 2 ? Outcome::compile_error : i == 6 ? Outcome::in_flight : Outcome::ok;
    t.median_us = 300.0 - i;
    t.timestamp = 1'790'000'000 + i;
    add_trial(batch, t);
  }
  ASSERT_TRUE(parts.store.write(batch, Durability::sync));
  // A lookup of a shape nobody tuned counts a miss.
  const std::string reply =
      parts.dispatcher
          .handle(
              R"({"v":1,"id":1,"op":"lookup","device":"nvidia-h200","problem":{"op":"gemm","dtype":"bf16","layout":"rc","dims":{"M":4096,"N":4096,"K":2048}}})")
          .line;
  ASSERT_NE(reply.find("\"ok\":true"), std::string::npos) << reply;
  ASSERT_EQ(parts.misses.total(), 1u) << reply;

  const std::string page = render_report_page(parts.ctx);
  EXPECT_EQ(count(page, "<section class=\"problem\""), 1u);
  EXPECT_EQ(count(page, "<rect class=\"cell\""), 3u);   // tiles with an ok trial
  EXPECT_EQ(count(page, "<rect class=\"empty\""), 1u);  // 128x64: compile error only
  EXPECT_EQ(count(page, "<text class=\"fail\""), 1u);
  EXPECT_EQ(count(page, "<circle class=\"point\""), 1u);
  EXPECT_EQ(count(page, "<rect class=\"miss\""), 1u);
  EXPECT_NE(page.find("6 measured configs in 1 recorded search"), std::string::npos);
  EXPECT_NE(page.find("report-node"), std::string::npos);
  EXPECT_EQ(page.find("class=\"left-out\""), std::string::npos) << "nothing left out";

  // One record that does not decode is left out and said; the page keeps the others (it said
  // "0 recorded trials" and showed no winners, silently).
  ASSERT_TRUE(parts.store.put(Table::trials, "zzz/broken", "\x01{not json", Durability::sync));
  ASSERT_TRUE(parts.store.put(Table::winners, "zzz/broken", "\x01{not json", Durability::sync));
  const std::string damaged = render_report_page(parts.ctx);
  EXPECT_NE(damaged.find("6 measured configs in 1 recorded search"), std::string::npos);
  EXPECT_EQ(count(damaged, "<circle class=\"point\""), 1u);
  EXPECT_NE(damaged.find("1 trials record(s) could not be decoded and are left out; the first: "
                         "trials key &#39;zzz/broken&#39;"),
            std::string::npos)
      << damaged.substr(0, 3000);
  EXPECT_NE(damaged.find("1 winners record(s) could not be decoded"), std::string::npos);
}

}  // namespace
}  // namespace ktune
