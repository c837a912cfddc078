#include "store/table_io.h"

#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>

#include "store/mem_store.h"
#include "store/rocksdb_store.h"
#include "store/table_readers.h"
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

// Positions are as an editor counts them, and as nlohmann's own message says (one past the last
// byte for a text that ends too early); an empty file says so.
TEST(TableIoTest, ErrorPositionsMatchTheParsersAndAnEmptyFileIsNamedSo) {
  MemStore dst;
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"{\n  \"a\": x}", "t.json:2:8: "},    // 'x', the 8th byte of line 2
      {"{\n  \"a\": tru", "t.json:2:11: "},  // a truncated file: where the parser stopped
      {"{x", "t.json:1:2: "}};
  for (const auto& [text, position] : cases) {
    auto r = import_table(dst, text, "t.json");
    ASSERT_FALSE(r) << text;
    EXPECT_TRUE(r.error().message.starts_with(position)) << r.error().message;
    const std::string said = "line " + position.substr(7, 1) + ", column " +
                             position.substr(9, position.size() - 11) + ":";
    EXPECT_NE(r.error().message.find(said), std::string::npos) << r.error().message;
  }
  for (const std::string empty : {"", "  \n\t\n"}) {
    auto r = import_table(dst, empty, "t.json");
    ASSERT_FALSE(r);
    EXPECT_EQ(r.error().message, "t.json: empty: no table in it");
  }
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

// A param name that is no C identifier is no template's: refused on import, whatever the template
// hash (fuzz_table found "BLOCK%N" accepted from a stale record, then its CSV export refused).
TEST(TableIoTest, ParamNamesThatAreNotIdentifiersAreRefused) {
  for (const std::string name : {"BLOCK%N", "BLOCK_'M", "\u0133OCK_K", "9LIVES", "", "A B"}) {
    auto w = testing::winner(testing::gemm_problem(64, 64, 64), 10.0);
    w.ranked[0].params.erase("BLOCK_N");
    auto text = render_table({w}, TableFormat::json);
    const std::string block = "\"BLOCK_M\": 128";
    const size_t at = text.find(block);
    ASSERT_NE(at, std::string::npos) << text;
    text.insert(at, "\"" + name + "\": 64, ");
    MemStore dst;
    auto report = import_table(dst, text, "x.json");
    ASSERT_TRUE(report) << report.error().message;
    EXPECT_FALSE(report->applied()) << name;
    ASSERT_EQ(report->rejected.size(), 1u) << name;
    EXPECT_NE(report->rejected[0].reason.find("is not a parameter name"), std::string::npos)
        << report->rejected[0].reason;
  }
  // The names templates use still import.
  MemStore dst;
  auto w = testing::winner(testing::gemm_problem(64, 64, 64), 10.0);
  w.ranked[0].params["_X9"] = 1;
  EXPECT_TRUE(import_table(dst, render_table({w}, TableFormat::json), "ok.json")->applied());
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

// Medians timed with the L2 flushed and rotated are not compared: a flushed record outranks a
// faster rotated one, which outranks a faster one that does not say how it was timed, whatever
// the order of the imports; between two timed alike the faster wins as before.
TEST(TableIoTest, MergeComparesTimesOnlyBetweenRecordsTimedAlike) {
  const auto p = testing::gemm_problem(4096, 4096, 4096);
  auto timed = [&](double us, TimingL2 t, const char* node) {
    auto w = testing::winner(p, us, node);
    w.timing_l2 = t;
    return w;
  };
  const auto flushed_slow = timed(200.0, TimingL2::flushed, "node-a");
  const auto flushed_fast = timed(190.0, TimingL2::flushed, "node-b");
  const auto rotated = timed(170.0, TimingL2::rotated, "node-c");
  const auto untold = timed(150.0, TimingL2::unknown, "node-d");
  EXPECT_TRUE(prefer_incoming(rotated, flushed_slow));
  EXPECT_FALSE(prefer_incoming(flushed_slow, rotated));
  EXPECT_TRUE(prefer_incoming(untold, rotated));
  EXPECT_FALSE(prefer_incoming(rotated, untold));
  EXPECT_TRUE(prefer_incoming(flushed_slow, flushed_fast));
  EXPECT_FALSE(prefer_incoming(flushed_fast, flushed_slow));
  auto doc = [](const WinnerRecord& w) { return render_table({w}, TableFormat::json); };
  std::vector<WinnerRecord> order = {untold, rotated, flushed_slow, flushed_fast};
  std::sort(order.begin(), order.end(),
            [](const auto& a, const auto& b) { return a.node_id < b.node_id; });
  do {
    MemStore s;
    for (const auto& w : order) ASSERT_TRUE(import_table(s, doc(w), "x")->applied());
    auto got = get_winner(s, flushed_fast.device, p);
    ASSERT_TRUE(got && *got);
    EXPECT_EQ(**got, flushed_fast);
  } while (std::next_permutation(order.begin(), order.end(), [](const auto& a, const auto& b) {
    return a.node_id < b.node_id;
  }));
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

// Every export format imports back to the same winners: strings that read as numbers or
// booleans stay strings, numbers keep every digit, text with commas and quotes survives CSV.
TEST(TableIoTest, YamlAndCsvExportsImportBackToTheSameWinners) {
  std::vector<WinnerRecord> winners = sample();
  winners[0].ranked[0].median_us = 180.123456789012;
  winners[0].validators.nvrtc = "13.0";
  winners[0].node_id = "yes";                   // YAML 1.1 would read a plain yes as true
  winners[0].timing_l2 = TimingL2::flushed;     // and winners[2] does not say (an empty cell)
  winners[1].timing_l2 = TimingL2::rotated;
  winners[1].sm_clock_counted_mhz = 1417;       // and the others were not counted
  winners[1].strategy = "null";                 // and a plain null as nothing
  winners[1].validators.driver = "580.159.03";  // not a number either
  winners[2].node_id = "rack 3, \"node\" 7";    // CSV quoting
  winners[2].ranked[0].template_hash = "0000000000001e10";  // a float if unquoted
  winners[2].power_w = 0.1 + 0.2;
  std::sort(winners.begin(), winners.end(),
            [](const WinnerRecord& a, const WinnerRecord& b) { return a.key() < b.key(); });
  for (auto format : {TableFormat::json, TableFormat::yaml, TableFormat::csv}) {
    const std::string text = render_table(winners, format);
    EXPECT_EQ(detect_table_format(text), format) << text.substr(0, 80);
    std::vector<ImportRejection> rejected;
    auto parsed = parse_table(text, "t", rejected);
    ASSERT_TRUE(parsed) << parsed.error().message;
    for (const auto& r : rejected) ADD_FAILURE() << r.reason;
    EXPECT_EQ(*parsed, winners) << text;
    MemStore store;
    auto report = import_table(store, text, "t");
    ASSERT_TRUE(report) << report.error().message;
    EXPECT_EQ(report->added, winners.size());
    EXPECT_EQ(*scan_winners(store), winners);
  }
}

// A CSV table exported before its optional columns existed (the last eight, the last two:
// timing_l2 and sm_clock_counted_mhz) imports with their defaults: a record of unknown timing,
// zero clocks.
TEST(TableIoTest, CsvWithoutTheOptionalColumnsImportsWithDefaults) {
  std::vector<WinnerRecord> winners = sample();
  for (auto& w : winners) {
    w.timing_l2 = TimingL2::flushed;
    w.sm_clock_counted_mhz = 1417;
  }
  const std::string csv = render_table(winners, TableFormat::csv);
  auto drop_columns = [](const std::string& text, size_t n) {  // the last n of each line
    std::string out;
    std::istringstream in(text);
    for (std::string line; std::getline(in, line);) {
      for (size_t i = 0; i < n; ++i) line.erase(line.rfind(','));
      out += line + "\n";
    }
    return out;
  };
  for (size_t dropped :
       {size_t(1), size_t(2), detail::k_csv_columns.size() - detail::k_csv_first_optional}) {
    std::vector<ImportRejection> rejected;
    auto parsed = parse_table(drop_columns(csv, dropped), "old.csv", rejected);
    ASSERT_TRUE(parsed) << parsed.error().message;
    EXPECT_TRUE(rejected.empty());
    ASSERT_EQ(parsed->size(), winners.size());
    for (const auto& w : *parsed) {
      EXPECT_EQ(w.sm_clock_counted_mhz, 0) << dropped;
      EXPECT_EQ(w.timing_l2, dropped == 1 ? TimingL2::flushed : TimingL2::unknown) << dropped;
      EXPECT_EQ(w.ranked.size(), 2u);
    }
  }
  std::vector<ImportRejection> rejected;
  auto bad =
      parse_table(std::regex_replace(csv, std::regex(",flushed,"), ",warm,"), "t.csv", rejected);
  ASSERT_TRUE(bad) << bad.error().message;
  ASSERT_EQ(rejected.size(), winners.size());
  EXPECT_NE(rejected[0].reason.find("timing_l2: unknown timing_l2 'warm'"), std::string::npos)
      << rejected[0].reason;
}

// A YAML or CSV table that cannot be read says where; a bad cell is a rejected record naming the
// field, as in JSON.
TEST(TableIoTest, UnreadableYamlAndCsvSayWhere) {
  MemStore dst;
  auto r = import_table(dst, "ktune_table: 1\nwinners: [\n  {a: 1\n", "t.yaml");
  ASSERT_FALSE(r);
  EXPECT_TRUE(r.error().message.starts_with("t.yaml:")) << r.error().message;
  r = import_table(
      dst, "ktune_table: 1\nwinners: " + std::string(5000, '[') + std::string(5000, ']') + "\n",
      "t.yaml");
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("t.yaml"), std::string::npos);
  const std::string csv = render_table(sample(), TableFormat::csv);
  r = import_table(dst, csv.substr(0, csv.find('\n')) + "\nnvidia-h200,gemm\n", "t.csv");
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("t.csv:2: 2 fields, the header has 28"), std::string::npos)
      << r.error().message;
  r = import_table(dst, "device,op\nx,y\n", "t.csv");
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("no column 'dtype'"), std::string::npos);
  std::string bad = csv;
  const size_t at = bad.find(",180,");
  ASSERT_NE(at, std::string::npos) << csv;
  bad.replace(at, 5, ",fast,");
  r = import_table(dst, bad, "t.csv");
  ASSERT_TRUE(r) << r.error().message;
  ASSERT_EQ(r->rejected.size(), 1u);
  EXPECT_NE(r->rejected[0].reason.find("median_us: expected a number"), std::string::npos)
      << r->rejected[0].reason;
  EXPECT_TRUE(scan_winners(dst)->empty());
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

// -o names what the user wants written: a link's target is replaced and the link kept; a device
// (/dev/null) is written into, never replaced by a regular file; a directory is refused whole.
TEST(TableIoTest, WritesFollowLinksIntoFilesAndDevicesAndRefuseDirectories) {
  namespace fs = std::filesystem;
  TempDir dir;
  ASSERT_TRUE(write_file_atomic(dir / "real.json", "old"));
  fs::create_symlink(dir / "real.json", dir / "link.json");
  ASSERT_TRUE(write_file_atomic(dir / "link.json", "new"));
  EXPECT_TRUE(fs::is_symlink(dir / "link.json"));
  std::ifstream in(dir / "real.json");
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(in), {}), "new");

  // Through a link, so a broken build of this function could only replace the link.
  fs::create_symlink("/dev/null", dir / "null");
  ASSERT_TRUE(fs::is_character_file("/dev/null"));
  auto to_null = write_file_atomic(dir / "null", "discarded");
  EXPECT_TRUE(to_null) << to_null.error().message;
  EXPECT_TRUE(fs::is_symlink(dir / "null"));
  EXPECT_TRUE(fs::is_character_file("/dev/null"));

  fs::create_directory(dir / "sub");
  auto refused = write_file_atomic(dir / "sub", "x");
  ASSERT_FALSE(refused);
  EXPECT_NE(refused.error().message.find("is a directory"), std::string::npos)
      << refused.error().message;
  EXPECT_TRUE(fs::is_directory(dir / "sub"));
  int files = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator(dir.path())) ++files;
  EXPECT_EQ(files, 4) << "no temporary file left behind";
}

// YAML scalars typed as a YAML 1.2 reader (core schema) types them: quoted ones are strings,
// plain ones are numbers, booleans or null when they look it.
nlohmann::ordered_json typed(const YAML::Node& n) {
  using Json = nlohmann::ordered_json;
  if (n.IsMap()) {
    Json j = Json::object();
    for (const auto& kv : n) {
      EXPECT_EQ(kv.first.Tag() == "!" || typed(kv.first).is_string(), true)
          << "key " << kv.first.Scalar() << " is not a string";
      j[kv.first.Scalar()] = typed(kv.second);
    }
    return j;
  }
  if (n.IsSequence()) {
    Json j = Json::array();
    for (const auto& item : n) j.push_back(typed(item));
    return j;
  }
  if (n.IsNull()) return nullptr;
  const std::string& s = n.Scalar();
  if (n.Tag() == "!") return s;  // quoted
  static const std::regex integer(R"([-+]?[0-9]+)"),
      real(R"([-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?)");
  if (std::regex_match(s, integer)) return std::stoll(s);
  if (std::regex_match(s, real)) return std::stod(s);
  if (s == "true" || s == "false") return s == "true";
  if (s == "null" || s == "~") return nullptr;
  // A YAML 1.1 reader would take these for booleans: the export must quote them.
  for (const char* word : {"yes", "no", "on", "off", "y", "n", "Yes", "NO", "True", "FALSE"})
    EXPECT_NE(s, word) << "plain '" << s << "' is a boolean to YAML 1.1 readers";
  return s;
}

// The JSON export is exactly what nlohmann's dump(2) prints (the format before it was written
// record by record), with no winners too.
TEST(TableIoTest, JsonExportIsThePrettyPrintedDocument) {
  for (const auto& winners : {sample(), std::vector<WinnerRecord>{}}) {
    const std::string text = render_table(winners, TableFormat::json);
    const auto doc = nlohmann::ordered_json::parse(text);
    EXPECT_EQ(text, doc.dump(2) + "\n");
    EXPECT_EQ(doc["count"], winners.size());
    EXPECT_EQ(doc["winners"].size(), winners.size());
  }
}

// The YAML export is the JSON document, every value of the same type: strings that look like
// numbers, booleans or YAML syntax stay strings; floats stay floats.
TEST(TableIoTest, YamlExportLoadsAsTheJsonDocument) {
  auto records = sample();
  records[0].node_id = "a: b # c";
  records[1].node_id = "quote\" back\\slash\nnewline\ttab \x01 \x7f end ";
  records[2].node_id = "n";
  records[0].strategy = "-dash";
  records[1].strategy = "true";
  records[2].strategy = "H200 \xc3\xa9t\xc3\xa9";
  records[0].validators.nvrtc = "13.0";
  records[1].validators.driver = "580.159.03";
  records[2].validators.driver = "";
  records[0].ranked[0].gbps = 0;
  records[1].problem.dims = {{"n", 1 << 20}};
  records[1].problem.op = "reduce_sum";
  for (const auto& winners : {records, std::vector<WinnerRecord>{}}) {
    const std::string yaml = render_table(winners, TableFormat::yaml);
    auto json = nlohmann::ordered_json::parse(render_table(winners, TableFormat::json));
    auto loaded = typed(YAML::Load(yaml));
    loaded.erase("exported_at");
    json.erase("exported_at");
    EXPECT_EQ(loaded, json) << yaml;
  }
  const std::string yaml = render_table(records, TableFormat::yaml);
  EXPECT_NE(yaml.find("\n  - device:\n      name: NVIDIA H200\n"), std::string::npos) << yaml;
  EXPECT_NE(yaml.find("nvrtc: \"13.0\"\n"), std::string::npos) << yaml;
  EXPECT_NE(yaml.find("gbps: 0.0\n"), std::string::npos) << yaml;
}

#if defined(__SANITIZE_ADDRESS__)
// Under ASan freed memory sits in quarantine and every block has redzones, so RSS says little
// about what the code holds: track the peak of live heap bytes instead, through ASan's hooks.
extern "C" size_t __sanitizer_get_current_allocated_bytes();
extern "C" int __sanitizer_install_malloc_and_free_hooks(void (*)(const volatile void*, size_t),
                                                         void (*)(const volatile void*));
size_t g_live_peak = 0;
void on_malloc(const volatile void*, size_t) {
  g_live_peak = std::max(g_live_peak, __sanitizer_get_current_allocated_bytes());
}
void on_free(const volatile void*) {}

// How much rendering raises the peak of live heap bytes; run in a child (see below).
double render_growth_mib(const std::vector<WinnerRecord>& winners, TableFormat format) {
  const size_t before = __sanitizer_get_current_allocated_bytes();
  g_live_peak = before;
  __sanitizer_install_malloc_and_free_hooks(on_malloc, on_free);
  const std::string text = render_table(winners, format);
  return text.empty() ? -1 : double(g_live_peak - before) / (1 << 20);
}
#else
double status_mib(const std::string& field) {
  std::ifstream in("/proc/self/status");
  for (std::string line; std::getline(in, line);)
    if (line.starts_with(field + ":")) return std::stod(line.substr(field.size() + 1)) / 1024.0;
  return -1;
}

// How much rendering raises the process's peak RSS; run in a child, whose peak starts at what it
// inherited.
double render_growth_mib(const std::vector<WinnerRecord>& winners, TableFormat format) {
  const double before = status_mib("VmRSS");
  const std::string text = render_table(winners, format);
  return text.empty() ? -1 : status_mib("VmHWM") - before;
}
#endif

// render_growth_mib in a child process, so each format starts from the same state.
double render_peak_mib(const std::vector<WinnerRecord>& winners, TableFormat format) {
  int fds[2];
  if (::pipe(fds) != 0) return -1;
  const pid_t pid = ::fork();
  if (pid == 0) {
    const double grew = render_growth_mib(winners, format);
    (void)!::write(fds[1], &grew, sizeof grew);
    ::_exit(0);
  }
  ::close(fds[1]);
  double grew = -1;
  if (::read(fds[0], &grew, sizeof grew) != ssize_t(sizeof grew)) grew = -1;
  ::close(fds[0]);
  ::waitpid(pid, nullptr, 0);
  return grew;
}

// Exports are written record by record: rendering 5,000 winners needs about the document's size
// (~5 MB of YAML, ~7 MB of JSON), not a tree of the table (before: YAML +398 MiB through a
// yaml-cpp node tree, JSON +28 MiB through a JSON tree).
TEST(TableIoTest, BigExportsAreWrittenRecordByRecord) {
  std::vector<WinnerRecord> winners;
  for (int i = 0; i < 5000; ++i)
    winners.push_back(testing::winner(testing::gemm_problem(16 + i, 4096, 4096), 10));
  for (auto format : {TableFormat::yaml, TableFormat::json, TableFormat::csv}) {
    const double peak = render_peak_mib(winners, format);
    std::printf("format %d: peak memory +%.1f MiB\n", int(format), peak);
    EXPECT_GE(peak, 0.0) << "format " << int(format);
    EXPECT_LT(peak, 20.0) << "format " << int(format);
  }
}

}  // namespace
}  // namespace ktune
