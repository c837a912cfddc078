#include "store/table_io.h"

#include <gtest/gtest.h>

#include <fstream>

#include "store/mem_store.h"
#include "store/rocksdb_store.h"
#include "tests/fakes/test_records.h"

namespace ktune {
namespace {

using testing::TempDir;

std::string read(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::vector<WinnerRecord> sample() {
  return {testing::winner(testing::gemm_problem(4096, 4096, 4096), 180.0),
          testing::winner(testing::gemm_problem(16, 4096, 4096), 21.5),
          testing::winner(testing::gemm_problem(8192, 8192, 8192, "fp16"), 1600.0)};
}

TEST(TableIoTest, ExportImportRoundTripThroughRocksDb) {
  TempDir dir;
  const std::string table = dir / "h200.json";
  {
    auto src = RocksDbStore::open(dir / "src");
    ASSERT_TRUE(src);
    for (const auto& w : sample()) ASSERT_TRUE(put_winner(**src, w));
    auto n = export_table(**src, table, TableFormat::json);
    ASSERT_TRUE(n) << n.error().message;
    EXPECT_EQ(*n, 3u);
  }
  auto dst = RocksDbStore::open(dir / "dst");
  ASSERT_TRUE(dst);
  auto report = import_table_file(**dst, table);
  ASSERT_TRUE(report) << report.error().message;
  EXPECT_TRUE(report->applied());
  EXPECT_EQ(report->added, 3u);
  auto all = scan_winners(**dst);
  ASSERT_TRUE(all);
  auto expected = sample();
  std::sort(expected.begin(), expected.end(), [](auto& a, auto& b) { return a.key() < b.key(); });
  EXPECT_EQ(*all, expected);
  // Importing the same table again changes nothing.
  auto again = import_table_file(**dst, table);
  ASSERT_TRUE(again);
  EXPECT_EQ(again->kept, 3u);
  EXPECT_EQ(again->added + again->replaced, 0u);
}

TEST(TableIoTest, TruncatedFileIsRejectedWholeWithClearMessage) {
  TempDir dir;
  MemStore src;
  for (const auto& w : sample()) ASSERT_TRUE(put_winner(src, w));
  ASSERT_TRUE(export_table(src, dir / "t.json", TableFormat::json));
  std::string text = read(dir / "t.json");
  MemStore dst;
  for (size_t cut : {text.size() / 3, text.size() / 2, text.size() - 5}) {
    auto r = import_table(dst, text.substr(0, cut), "t.json");
    ASSERT_FALSE(r) << "cut at " << cut;
    EXPECT_TRUE(r.error().message.starts_with("t.json:")) << r.error().message;
    EXPECT_NE(r.error().message.find(": not a JSON table (truncated or damaged?)"),
              std::string::npos)
        << r.error().message;
  }
  EXPECT_TRUE(scan_winners(dst)->empty());
}

TEST(TableIoTest, GarbageAndWrongDocumentsAreRejected) {
  MemStore dst;
  auto r = import_table(dst, "\x89PNG\r\n garbage", "g.json");
  ASSERT_FALSE(r);
  r = import_table(dst, "{\"winners\": []}", "g.json");
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("no \"ktune_table\""), std::string::npos);
  r = import_table(dst, "{\"ktune_table\": 7, \"winners\": []}", "g.json");
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::format_mismatch);
  r = import_table(dst, "{\"ktune_table\": 1, \"count\": 5, \"winners\": []}", "g.json");
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("header says 5 records, the file holds 0"), std::string::npos);
}

// Content nlohmann throws on (a number beyond a double, invalid UTF-8) or that would recurse
// (deep nesting) is an Error naming file:line:column, never an exception.
TEST(TableIoTest, UnreadableContentIsAnErrorWithLineAndColumn) {
  MemStore src;
  for (const auto& w : sample()) ASSERT_TRUE(put_winner(src, w));
  const std::string text = render_table(*scan_winners(src), TableFormat::json);
  const size_t at = text.find("\"median_us\": ") + std::string("\"median_us\": ").size();
  const std::string line = std::to_string(1 + std::count(text.begin(), text.begin() + long(at), '\n'));
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"1e400", "number out of range"}, {"-1e999", "number out of range"},
      {"\"\xff\xfe\"", "UTF-8"},        {"\"\xed\xa0\x80\"", "UTF-8"}};
  MemStore dst;
  for (const auto& [value, what] : cases) {
    std::string broken = text;
    broken.replace(at, broken.find(',', at) - at, value);
    Result<ImportReport> r = fail(ErrorCode::internal, "not run");
    EXPECT_NO_THROW(r = import_table(dst, broken, "t.json")) << value;
    ASSERT_FALSE(r) << value;
    EXPECT_TRUE(r.error().message.starts_with("t.json:" + line + ":")) << r.error().message;
    EXPECT_NE(r.error().message.find(what), std::string::npos) << r.error().message;
  }
  auto deep = import_table(dst, "{\"ktune_table\": 1, \"x\": " + std::string(200'000, '[') +
                                    std::string(200'000, ']') + "}", "t.json");
  ASSERT_FALSE(deep);
  EXPECT_NE(deep.error().message.find("nest deeper than"), std::string::npos);
  // A damaged header is described by type, not echoed (it could be megabytes).
  auto huge = import_table(dst, "{\"ktune_table\": \"" + std::string(1'000'000, 'x') +
                                    "\", \"winners\": []}", "t.json");
  ASSERT_FALSE(huge);
  EXPECT_LT(huge.error().message.size(), 200u) << huge.error().message.substr(0, 200);
  EXPECT_TRUE(scan_winners(dst)->empty());
}

TEST(TableIoTest, BadRecordsAreListedAndNothingIsImported) {
  MemStore src;
  for (const auto& w : sample()) ASSERT_TRUE(put_winner(src, w));
  std::string text = render_table(*scan_winners(src), TableFormat::json);
  // Break the second record's median and the third record's dims.
  auto nth = [&](const std::string& needle, int n) {
    size_t pos = 0;
    for (int i = 0; i <= n; ++i) pos = text.find(needle, i ? pos + 1 : 0);
    return pos;
  };
  const size_t m = nth("\"median_us\": ", 2);  // ranked[0] of winners[1]
  text.replace(m, std::string("\"median_us\": ").size(), "\"median_us\": -");
  const size_t d = nth("\"M\": ", 2);
  text.replace(d, std::string("\"M\": ").size(), "\"M\": -");
  MemStore dst;
  auto report = import_table(dst, text, "bad.json");
  ASSERT_TRUE(report) << report.error().message;
  EXPECT_FALSE(report->applied());
  ASSERT_EQ(report->rejected.size(), 2u);
  EXPECT_EQ(report->rejected[0].index, 1u);
  EXPECT_NE(report->rejected[0].reason.find("winners[1]"), std::string::npos)
      << report->rejected[0].reason;
  EXPECT_NE(report->rejected[0].reason.find("median_us"), std::string::npos);
  EXPECT_EQ(report->rejected[1].index, 2u);
  EXPECT_NE(report->rejected[1].reason.find("out of range"), std::string::npos)
      << report->rejected[1].reason;
  EXPECT_TRUE(scan_winners(dst)->empty());
}

TEST(TableIoTest, MergeIsDeterministicInAnyOrder) {
  const auto p = testing::gemm_problem(4096, 4096, 4096);
  const auto fast = testing::winner(p, 170.0, "node-b");
  const auto slow = testing::winner(p, 190.0, "node-a");
  const auto tie = testing::winner(p, 170.0, "node-c", 1'790'000'000);
  auto doc = [](const WinnerRecord& w) { return render_table({w}, TableFormat::json); };
  std::vector<std::vector<WinnerRecord>> orders = {
      {fast, slow, tie}, {tie, slow, fast}, {slow, tie, fast}};
  std::optional<WinnerRecord> first;
  for (const auto& order : orders) {
    MemStore s;
    for (const auto& w : order) ASSERT_TRUE(import_table(s, doc(w), "x")->applied());
    auto got = get_winner(s, fast.device, p);
    ASSERT_TRUE(got && *got);
    if (!first) first = **got;
    EXPECT_EQ(**got, *first);
  }
  EXPECT_EQ(first->ranked[0].median_us, 170.0);
  EXPECT_EQ(first->node_id, "node-c");  // same time, same timestamp: larger node id
}

TEST(TableIoTest, YamlAndCsvExports) {
  MemStore s;
  for (const auto& w : sample()) ASSERT_TRUE(put_winner(s, w));
  const auto winners = *scan_winners(s);
  const std::string yaml = render_table(winners, TableFormat::yaml);
  EXPECT_NE(yaml.find("ktune_table: 1"), std::string::npos);
  EXPECT_NE(yaml.find("template: gemm"), std::string::npos);
  const std::string csv = render_table(winners, TableFormat::csv);
  // Header + 2 ranked rows per winner.
  EXPECT_EQ(std::count(csv.begin(), csv.end(), '\n'), 1 + 2 * 3);
  EXPECT_NE(csv.find("\"M=16,N=4096,K=4096\""), std::string::npos);
  EXPECT_FALSE(parse_table_format("xml"));
}

TEST(TableIoTest, ExportIsAtomic) {
  TempDir dir;
  MemStore s;
  ASSERT_TRUE(put_winner(s, sample()[0]));
  ASSERT_TRUE(export_table(s, dir / "t.json", TableFormat::json));
  // No temporary files are left behind.
  int files = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir.path())) {
    ++files;
    EXPECT_EQ(e.path().filename(), "t.json");
  }
  EXPECT_EQ(files, 1);
  EXPECT_FALSE(export_table(s, dir / "no/such/dir/t.json", TableFormat::json));
}

}  // namespace
}  // namespace ktune
