// One suite every Store implementation must pass: ordered scans, prefixes, atomic batches,
// overwrite and delete semantics, binary-safe values.
#include <gtest/gtest.h>
#include <rocksdb/db.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>

#include "store/mem_store.h"
#include "store/records.h"
#include "store/rocksdb_store.h"
#include "tests/fakes/test_records.h"

namespace ktune {
namespace {

using testing::TempDir;

struct StoreFactory {
  std::string name;
  std::function<std::unique_ptr<Store>(const std::string& dir)> make;
};

class StoreConformanceTest : public ::testing::TestWithParam<StoreFactory> {
 protected:
  void SetUp() override { m_store = GetParam().make(m_dir.path() + "/db"); }
  TempDir m_dir;
  std::unique_ptr<Store> m_store;
};

std::vector<std::pair<std::string, std::string>> scan_all(Store& s, Table t,
                                                          const std::string& prefix) {
  std::vector<std::pair<std::string, std::string>> out;
  auto ok = s.scan(t, prefix, [&](std::string_view k, std::string_view v) {
    out.emplace_back(std::string(k), std::string(v));
    return true;
  });
  EXPECT_TRUE(ok);
  return out;
}

TEST_P(StoreConformanceTest, GetMissingIsEmptyNotError) {
  auto v = m_store->get(Table::winners, "nope");
  ASSERT_TRUE(v);
  EXPECT_FALSE(v->has_value());
}

TEST_P(StoreConformanceTest, PutGetOverwriteRemove) {
  ASSERT_TRUE(m_store->put(Table::jobs, "k", "v1", Durability::sync));
  EXPECT_EQ(m_store->get(Table::jobs, "k")->value(), "v1");
  ASSERT_TRUE(m_store->put(Table::jobs, "k", "v2", Durability::buffered));
  EXPECT_EQ(m_store->get(Table::jobs, "k")->value(), "v2");
  ASSERT_TRUE(m_store->remove(Table::jobs, "k", Durability::sync));
  EXPECT_FALSE(m_store->get(Table::jobs, "k")->has_value());
  EXPECT_TRUE(m_store->remove(Table::jobs, "k", Durability::sync));  // absent: still fine
}

TEST_P(StoreConformanceTest, TablesAreSeparate) {
  ASSERT_TRUE(m_store->put(Table::trials, "same", "t", Durability::buffered));
  ASSERT_TRUE(m_store->put(Table::cubins, "same", "c", Durability::buffered));
  EXPECT_EQ(m_store->get(Table::trials, "same")->value(), "t");
  EXPECT_EQ(m_store->get(Table::cubins, "same")->value(), "c");
  EXPECT_FALSE(m_store->get(Table::blocklist, "same")->has_value());
}

TEST_P(StoreConformanceTest, ScanIsOrderedAndPrefixed) {
  for (const char* k : {"b/2", "a/1", "b/1", "c", "b/10", "ba"})
    ASSERT_TRUE(m_store->put(Table::winners, k, std::string("v") + k, Durability::buffered));
  auto rows = scan_all(*m_store, Table::winners, "b/");
  ASSERT_EQ(rows.size(), 3u);
  EXPECT_EQ(rows[0].first, "b/1");
  EXPECT_EQ(rows[1].first, "b/10");
  EXPECT_EQ(rows[2].first, "b/2");
  EXPECT_EQ(scan_all(*m_store, Table::winners, "").size(), 6u);
  EXPECT_TRUE(scan_all(*m_store, Table::winners, "zz").empty());
}

TEST_P(StoreConformanceTest, ScanStopsWhenAsked) {
  for (int i = 0; i < 10; ++i)
    ASSERT_TRUE(m_store->put(Table::trials, "k" + std::to_string(i), "v", Durability::buffered));
  int seen = 0;
  ASSERT_TRUE(m_store->scan(Table::trials, "",
                            [&](std::string_view, std::string_view) { return ++seen < 3; }));
  EXPECT_EQ(seen, 3);
}

TEST_P(StoreConformanceTest, BatchAppliesAllOps) {
  ASSERT_TRUE(m_store->put(Table::jobs, "gone", "x", Durability::sync));
  WriteBatch b;
  b.put(Table::jobs, "a", "1");
  b.put(Table::trials, "b", "2");
  b.remove(Table::jobs, "gone");
  ASSERT_TRUE(m_store->write(b, Durability::sync));
  EXPECT_EQ(m_store->get(Table::jobs, "a")->value(), "1");
  EXPECT_EQ(m_store->get(Table::trials, "b")->value(), "2");
  EXPECT_FALSE(m_store->get(Table::jobs, "gone")->has_value());
}

TEST_P(StoreConformanceTest, BinaryValuesSurvive) {
  std::string bytes;
  for (int i = 0; i < 256; ++i) bytes += char(i);
  bytes += std::string(3, '\0');
  ASSERT_TRUE(m_store->put(Table::cubins, std::string("k\0ey", 4), bytes, Durability::buffered));
  EXPECT_EQ(m_store->get(Table::cubins, std::string("k\0ey", 4))->value(), bytes);
}

TEST_P(StoreConformanceTest, TypedWinnerRoundTrip) {
  const WinnerRecord w = testing::winner(testing::gemm_problem(4096, 4096, 4096), 180.5);
  ASSERT_TRUE(put_winner(*m_store, w));
  auto back = get_winner(*m_store, w.device, w.problem);
  ASSERT_TRUE(back);
  ASSERT_TRUE(back->has_value());
  EXPECT_EQ(**back, w);
  auto all = scan_winners(*m_store, w.device.id());
  ASSERT_TRUE(all);
  ASSERT_EQ(all->size(), 1u);
  EXPECT_EQ(all->front(), w);
  EXPECT_TRUE(scan_winners(*m_store, "other.sm80.108sm.40gib")->empty());
}

TEST_P(StoreConformanceTest, UndecodableRecordIsNamedInScan) {
  ASSERT_TRUE(m_store->put(Table::winners, "dev/bad", "\x01{not json", Durability::sync));
  auto all = scan_winners(*m_store);
  ASSERT_FALSE(all);
  EXPECT_EQ(all.error().code, ErrorCode::corruption);
  EXPECT_NE(all.error().message.find("winners key 'dev/bad'"), std::string::npos);
}

// flush() moves a table's recent writes out of memory; every record reads back the same, and
// writes after it win as before.
TEST_P(StoreConformanceTest, FlushKeepsEveryRecordAsItWas) {
  for (int i = 0; i < 1000; ++i)
    ASSERT_TRUE(m_store->put(Table::winners, "k" + std::to_string(1000 + i),
                             "v" + std::to_string(i), Durability::buffered));
  ASSERT_TRUE(m_store->remove(Table::winners, "k1500", Durability::buffered));
  ASSERT_TRUE(m_store->flush(Table::winners));
  auto all = scan_all(*m_store, Table::winners, "k");
  ASSERT_EQ(all.size(), 999u);
  EXPECT_EQ(all.front(), (std::pair<std::string, std::string>{"k1000", "v0"}));
  EXPECT_FALSE(m_store->get(Table::winners, "k1500")->has_value());
  ASSERT_TRUE(m_store->put(Table::winners, "k1000", "newer", Durability::sync));
  EXPECT_EQ(m_store->get(Table::winners, "k1000")->value(), "newer");
  EXPECT_TRUE(m_store->flush(Table::jobs)) << "nothing written there: nothing to do";
}

INSTANTIATE_TEST_SUITE_P(
    Stores, StoreConformanceTest,
    ::testing::Values(StoreFactory{"MemStore",
                                   [](const std::string&) -> std::unique_ptr<Store> {
                                     auto s = std::make_unique<MemStore>();
                                     EXPECT_TRUE(check_store_format(*s, false));
                                     return s;
                                   }},
                      StoreFactory{"RocksDbStore",
                                   [](const std::string& dir) -> std::unique_ptr<Store> {
                                     auto s = RocksDbStore::open(dir);
                                     EXPECT_TRUE(s) << s.error().message;
                                     return std::move(*s);
                                   }}),
    [](const auto& test_info) { return test_info.param.name; });

// --- RocksDB-specific: persistence, format checks, damage ---

// What flush() frees is the memtable: its records go to a new table file.
TEST(RocksDbStoreTest, FlushWritesTheTablesMemtableToAFile) {
  TempDir dir;
  auto s = RocksDbStore::open(dir / "db");
  ASSERT_TRUE(s) << s.error().message;
  auto table_files = [&] { return testing::table_files(dir / "db"); };
  const size_t before = table_files();
  for (int i = 0; i < 100; ++i)
    ASSERT_TRUE(put_winner(**s, testing::winner(testing::gemm_problem(16 * (i + 1), 64, 64), 9.0)));
  EXPECT_EQ(table_files(), before) << "in the memtable (and the log) only";
  ASSERT_TRUE((*s)->flush(Table::winners));
  EXPECT_EQ(table_files(), before + 1);
  auto all = scan_winners(**s);
  ASSERT_TRUE(all);
  EXPECT_EQ(all->size(), 100u);
}

TEST(RocksDbStoreTest, WrittenClosedReopenedLosesNothing) {
  TempDir dir;
  const std::string path = dir / "db";
  std::vector<WinnerRecord> written;
  {
    auto s = RocksDbStore::open(path);
    ASSERT_TRUE(s) << s.error().message;
    for (int i = 0; i < 50; ++i) {
      written.push_back(testing::winner(testing::gemm_problem(64 * (i + 1), 4096, 4096), 10.0 + i));
      ASSERT_TRUE(put_winner(**s, written.back()));
    }
    WriteBatch b;
    for (int i = 0; i < 200; ++i) {
      TrialRecord t;
      t.device = testing::h200();
      t.problem = testing::gemm_problem(4096, 4096, 4096);
      t.template_name = "gemm";
      t.template_hash = "0123456789abcdef";
      t.params = {{"BLOCK_M", 16 * (i + 1)}};
      t.outcome = i % 7 == 0 ? Outcome::compile_error : Outcome::ok;
      t.median_us = 100 + i;
      add_trial(b, t);
    }
    ASSERT_TRUE((*s)->write(b, Durability::buffered));
    CubinEntry c{"_Z5ktune",
                 128,
                 0,
                 0,
                 49152,
                 0,
                 310.5,
                 std::string("\x7f"
                             "ELF\0\1\2",
                             7)};
    ASSERT_TRUE(put_cubin(**s, "gemm/sm_90/abc", c));
  }  // closed
  auto s = RocksDbStore::open(path, {.create_if_missing = false});
  ASSERT_TRUE(s) << s.error().message;
  auto all = scan_winners(**s);
  ASSERT_TRUE(all);
  std::sort(written.begin(), written.end(), [](auto& a, auto& b) { return a.key() < b.key(); });
  EXPECT_EQ(*all, written);
  EXPECT_EQ(scan_trials(**s)->size(), 200u);
  auto c = get_cubin(**s, "gemm/sm_90/abc");
  ASSERT_TRUE(c && *c);
  EXPECT_EQ((*c)->cubin, std::string("\x7f"
                                     "ELF\0\1\2",
                                     7));
  EXPECT_EQ((*c)->registers, 128);
}

TEST(RocksDbStoreTest, MissingStoreWithoutCreateIsNotFound) {
  TempDir dir;
  auto s = RocksDbStore::open(dir / "absent", {.create_if_missing = false});
  ASSERT_FALSE(s);
  EXPECT_EQ(s.error().code, ErrorCode::not_found);
}

TEST(RocksDbStoreTest, FormatMismatchRefusesToOpenAndKeepsData) {
  TempDir dir;
  const std::string path = dir / "db";
  {
    auto s = RocksDbStore::open(path);
    ASSERT_TRUE(s);
    ASSERT_TRUE(put_winner(**s, testing::winner(testing::gemm_problem(8, 8, 8), 1.0)));
    ASSERT_TRUE((*s)->put(Table::meta, "format_version", "99", Durability::sync));
  }
  auto s = RocksDbStore::open(path);
  ASSERT_FALSE(s);
  EXPECT_EQ(s.error().code, ErrorCode::format_mismatch);
  EXPECT_NE(s.error().message.find("store format version 99, this ktune reads 1"),
            std::string::npos);
  // Nothing was wiped: with the format set back through RocksDB itself, the winner reads back.
  {
    std::vector<std::string> names;
    ASSERT_TRUE(rocksdb::DB::ListColumnFamilies(rocksdb::DBOptions(), path, &names).ok());
    std::vector<rocksdb::ColumnFamilyDescriptor> families;
    for (const std::string& n : names) families.emplace_back(n, rocksdb::ColumnFamilyOptions());
    std::vector<rocksdb::ColumnFamilyHandle*> handles;
    rocksdb::DB* raw = nullptr;
    ASSERT_TRUE(rocksdb::DB::Open(rocksdb::DBOptions(), path, families, &handles, &raw).ok());
    std::unique_ptr<rocksdb::DB> db(raw);
    const auto meta = std::find(names.begin(), names.end(), table_name(Table::meta));
    ASSERT_NE(meta, names.end());
    EXPECT_TRUE(db->Put(rocksdb::WriteOptions(), handles[size_t(meta - names.begin())],
                        "format_version", "1")
                    .ok());
    for (auto* h : handles) db->DestroyColumnFamilyHandle(h);
  }
  auto reopened = RocksDbStore::open(path);
  ASSERT_TRUE(reopened) << reopened.error().message;
  const WinnerRecord w = testing::winner(testing::gemm_problem(8, 8, 8), 1.0);
  auto back = get_winner(**reopened, w.device, w.problem);
  ASSERT_TRUE(back && *back);
  EXPECT_EQ((*back)->ranked.front().median_us, 1.0);
}

TEST(RocksDbStoreTest, SecondOpenWhileHeldIsRefused) {
  TempDir dir;
  auto a = RocksDbStore::open(dir / "db");
  ASSERT_TRUE(a);
  auto b = RocksDbStore::open(dir / "db");
  ASSERT_FALSE(b);
  EXPECT_NE(b.error().message.find("another process"), std::string::npos) << b.error().message;
}

}  // namespace
}  // namespace ktune
