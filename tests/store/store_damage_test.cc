// Store damage, on a real RocksDB in a temp dir: each fault either refuses to open with an error
// that names the damage and the way out (`ktuned --recover`), or is recovered by recover_store
// with a report of what was dropped or rolled back. Never silent loss, never an empty store in
// place of a damaged one. docs/reliability.md ("Store damage") lists the outcomes.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include <rocksdb/db.h>

#include "store/records.h"
#include "store/recovery.h"
#include "store/rocksdb_store.h"
#include "tests/fakes/store_faults.h"
#include "tests/fakes/test_records.h"

namespace ktune {
namespace {

namespace fs = std::filesystem;
using testing::TempDir;

// Winner `i` of import version `version`: each version is faster, so it replaces the one before.
WinnerRecord versioned(int i, int version) {
  return testing::winner(testing::gemm_problem(16 + i, 4096, 4096), 100.0 - version, "node-a",
                         1'790'000'000 + version);
}

// Writes `n` winners of `version`, one sync write each.
void put_version(Store& store, int n, int version) {
  for (int i = 0; i < n; ++i) ASSERT_TRUE(put_winner(store, versioned(i, version)));
}

// A store holding `versions` imports of `n` winners (one atomic sync batch each, as an import
// writes them), one table file per import (closed after each: a clean shutdown flushes).
void make_store(const std::string& path, int n, int versions = 1) {
  for (int v = 1; v <= versions; ++v) {
    auto s = RocksDbStore::open(path);
    ASSERT_TRUE(s) << s.error().message;
    WriteBatch batch;
    for (int i = 0; i < n; ++i) {
      const WinnerRecord w = versioned(i, v);
      batch.put(Table::winners, w.key(), encode(w));
    }
    if (!batch.empty()) {
      ASSERT_TRUE((*s)->write(batch, Durability::sync));
    }
  }
}

// The import version each stored winner holds (by timestamp), counted.
std::map<int, int> versions_held(Store& store) {
  std::map<int, int> out;
  auto all = scan_winners(store);
  EXPECT_TRUE(all) << all.error().message;
  if (!all) return out;
  for (const auto& w : *all) ++out[int(w.timestamp - 1'790'000'000)];
  return out;
}

std::vector<std::string> file_names(const std::string& dir, const std::string& suffix) {
  std::vector<std::string> out;
  for (const auto& f : testing::store_files(dir, "", suffix))
    out.push_back(fs::path(f).filename().string());
  return out;
}

// Every table has a table file (an anchor at least: a range deletion no reader sees), so that
// RepairDB knows every table.
void expect_every_table_has_a_file(const std::string& path) {
  for (Table t : k_all_tables)
    EXPECT_FALSE(testing::newest_table_file(path, std::string(table_name(t)), true).empty())
        << table_name(t);
}

void expect_refused_with_hint(const std::string& path, const std::string& what) {
  auto s = RocksDbStore::open(path);
  ASSERT_FALSE(s) << "a damaged store opened (" << what << ")";
  EXPECT_EQ(s.error().code, ErrorCode::corruption) << s.error().message;
  EXPECT_NE(s.error().message.find(what), std::string::npos) << s.error().message;
  EXPECT_NE(s.error().message.find("ktuned --recover"), std::string::npos) << s.error().message;
}

TEST(StoreDamageTest, MissingCurrentIsRefusedNotRecreated) {
  TempDir dir;
  const std::string path = dir / "db";
  make_store(path, 20);
  fs::remove(path + "/CURRENT");
  for (const auto& log : testing::store_files(path, "", ".log")) fs::remove(log);
  const auto tables = testing::store_files(path, "", ".sst");
  ASSERT_FALSE(tables.empty());
  expect_refused_with_hint(path, "no CURRENT file");
  expect_refused_with_hint(path, "no CURRENT file");  // still refused: nothing was created
  EXPECT_EQ(testing::store_files(path, "", ".sst"), tables) << "table files were touched";
  EXPECT_FALSE(fs::exists(path + "/CURRENT"));
}

TEST(StoreDamageTest, MissingCurrentIsRecoveredFromTheTableFiles) {
  TempDir dir;
  const std::string path = dir / "db";
  make_store(path, 20);
  fs::remove(path + "/CURRENT");
  for (const auto& log : testing::store_files(path, "", ".log")) fs::remove(log);
  const auto tables = file_names(path, ".sst");
  auto r = recover_store(path);
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_TRUE(r->report.repaired);
  ASSERT_FALSE(r->report.damage.empty());
  EXPECT_NE(r->report.damage[0].find("no CURRENT file"), std::string::npos);
  EXPECT_EQ(versions_held(*r->store), (std::map<int, int>{{1, 20}}));
  EXPECT_FALSE(r->report.lossy()) << r->report.summary();
  EXPECT_NE(r->report.summary().find("nothing was lost"), std::string::npos);
  // The damaged store is kept as it was, beside the recovered one.
  ASSERT_FALSE(r->report.damaged_copy.empty());
  EXPECT_EQ(file_names(r->report.damaged_copy, ".sst"), tables);
  EXPECT_FALSE(fs::exists(r->report.damaged_copy + "/CURRENT"));
  expect_every_table_has_a_file(path);
}

TEST(StoreDamageTest, GarbledCurrentIsRefusedThenRecovered) {
  TempDir dir;
  const std::string path = dir / "db";
  make_store(path, 20);
  std::ofstream(path + "/CURRENT", std::ios::trunc) << "\xee\xee\xee\xee";
  expect_refused_with_hint(path, "CURRENT");
  std::ofstream(path + "/CURRENT", std::ios::trunc) << "MANIFEST-999999\n";  // names no file
  expect_refused_with_hint(path, "MANIFEST-999999");
  auto r = recover_store(path);
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(versions_held(*r->store), (std::map<int, int>{{1, 20}}));
  EXPECT_FALSE(r->report.lossy()) << r->report.summary();
}

TEST(StoreDamageTest, MissingManifestIsRefusedThenRecovered) {
  TempDir dir;
  const std::string path = dir / "db";
  make_store(path, 20);
  for (const auto& m : testing::store_files(path, "MANIFEST-")) fs::remove(m);
  expect_refused_with_hint(path, "MANIFEST");
  auto r = recover_store(path);
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(versions_held(*r->store), (std::map<int, int>{{1, 20}}));
  EXPECT_FALSE(r->report.lossy()) << r->report.summary();
}

// A crash image (writes only in the log, one table never flushed to a table file), then the
// MANIFEST garbled: recovery keeps every logged write, the never-flushed table's included.
TEST(StoreDamageTest, GarbledManifestIsRefusedThenRecoveredWithLoggedWrites) {
  TempDir dir;
  const std::string path = dir / "db", image = dir / "image";
  make_store(path, 20);
  {
    auto s = RocksDbStore::open(path);
    ASSERT_TRUE(s);
    JobRecord j;
    j.device = testing::h200();
    j.strategy = "random";
    j.origin = "request";
    for (int i = 0; i < 5; ++i) {
      j.id = "00000000000" + std::to_string(i + 1);
      j.problem = testing::gemm_problem(8 + i, 8, 8);
      ASSERT_TRUE(put_job(**s, j));
    }
    put_version(**s, 20, 2);
    testing::crash_image(path, image);
  }
  testing::garble(testing::store_files(image, "MANIFEST-").back(), 0, 64);
  expect_refused_with_hint(image, "MANIFEST");
  auto r = recover_store(image);
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(scan_jobs(*r->store)->size(), 5u) << r->report.summary();
  EXPECT_EQ(versions_held(*r->store), (std::map<int, int>{{2, 20}}));
  EXPECT_TRUE(r->report.rocksdb_warnings.empty()) << r->report.summary();
  EXPECT_FALSE(r->report.lossy()) << r->report.summary();
}

// Issue 9: the newest table file cut short. The store refuses to open; recovery drops the file,
// and the keys it held are served from the import before it: the report says so.
TEST(StoreDamageTest, TruncatedNewestTableFileIsRefusedThenReportedAsRolledBack) {
  TempDir dir;
  const std::string path = dir / "db";
  make_store(path, 200, 2);
  const std::string newest = testing::newest_table_file(path, "winners");
  ASSERT_FALSE(newest.empty());
  testing::truncate_to(newest, fs::file_size(newest) / 2);
  expect_refused_with_hint(path, fs::path(newest).filename().string());
  auto r = recover_store(path);
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(versions_held(*r->store), (std::map<int, int>{{1, 200}})) << "version 2 rolled back";
  const RecoveryReport& report = r->report;
  EXPECT_TRUE(report.lossy());
  ASSERT_EQ(report.dropped_files.size(), 1u) << report.summary();
  const auto& d = report.dropped_files[0];
  EXPECT_EQ(d.name, "lost/" + fs::path(newest).filename().string());
  EXPECT_EQ(d.table, "winners") << "from the MANIFEST: the file itself is unreadable";
  EXPECT_TRUE(d.key_range_known);
  EXPECT_GT(d.largest_seq, d.smallest_seq);
  EXPECT_EQ(d.now_in_range, 200) << "every record in its key range may be older";
  const std::string summary = report.summary();
  EXPECT_NE(summary.find("may hold older values"), std::string::npos) << summary;
  EXPECT_NE(summary.find("winners"), std::string::npos) << summary;
}

// The newest table file garbled in the middle: the store opens (RocksDB reads blocks lazily), the
// first full read fails with the hint, and recovery counts exactly which keys rolled back.
TEST(StoreDamageTest, GarbledNewestTableFileFailsTheScanThenCountsRolledBackKeys) {
  TempDir dir;
  const std::string path = dir / "db";
  make_store(path, 200, 2);
  const std::string newest = testing::newest_table_file(path, "winners");
  ASSERT_FALSE(newest.empty());
  testing::garble(newest, std::int64_t(fs::file_size(newest) / 3), 64);
  {
    auto s = RocksDbStore::open(path);
    ASSERT_TRUE(s) << s.error().message;
    auto all = scan_winners(**s);
    ASSERT_FALSE(all) << "a garbled block was read without error";
    const Error e = with_recover_hint(all.error());
    EXPECT_EQ(e.code, ErrorCode::corruption);
    EXPECT_NE(e.message.find("ktuned --recover"), std::string::npos) << e.message;
  }
  auto r = recover_store(path);
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(versions_held(*r->store), (std::map<int, int>{{1, 200}}));
  ASSERT_EQ(r->report.dropped_files.size(), 1u) << r->report.summary();
  const auto& d = r->report.dropped_files[0];
  EXPECT_EQ(d.table, "winners");
  EXPECT_EQ(d.entries, 200);
  EXPECT_GT(d.readable, 0) << "the blocks before the damage are readable";
  EXPECT_LT(d.readable, 200);
  EXPECT_EQ(d.rolled_back, d.readable);
  EXPECT_EQ(d.lost, 0);
  EXPECT_FALSE(d.examples.empty());
  const std::string summary = r->report.summary();
  EXPECT_NE(summary.find(std::to_string(d.rolled_back) + " rolled back"), std::string::npos)
      << summary;
}

// A crash image: `n` winners of version 1 in table files, then version 2 of the same `n` written
// one sync write each, only in the write-ahead log. Returns the image's newest log.
std::string logged_versions(const TempDir& dir, int n) {
  const std::string path = dir / "db", image = dir / "image";
  make_store(path, n);
  auto s = RocksDbStore::open(path);
  EXPECT_TRUE(s);
  if (!s) return "";
  put_version(**s, n, 2);
  testing::crash_image(path, image);
  return testing::store_files(image, "", ".log").back();
}

// Every replayed log is replayed to its end (the check counts records as log::Writer lays them
// out: records of any size, across 32 KiB blocks), so a clean crash image opens without warnings.
TEST(StoreDamageTest, CrashImageReplaysEveryLogToItsEnd) {
  TempDir dir;
  const std::string path = dir / "db", image = dir / "image";
  {
    auto s = RocksDbStore::open(path);
    ASSERT_TRUE(s);
    std::uint64_t seed = 7;
    for (int i = 0; i < 120; ++i) {
      seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
      const size_t len = (seed >> 33) % (i % 3 == 0 ? 70'000 : 300);
      ASSERT_TRUE((*s)->put(Table::trials, "k" + std::to_string(i), std::string(len, 'x'),
                            Durability::sync));
    }
    testing::crash_image(path, image);
  }
  auto s = RocksDbStore::open(image);
  ASSERT_TRUE(s) << s.error().message;
  EXPECT_TRUE((*s)->open_warnings().empty()) << (*s)->open_warnings().front();
  int n = 0;
  ASSERT_TRUE((*s)->scan(Table::trials, "", [&](std::string_view, std::string_view) {
    ++n;
    return true;
  }));
  EXPECT_EQ(n, 120);
}

// A write cut short at the end of the log (what a crash mid-write leaves) is dropped; every
// write acknowledged before it is kept, the store opens without --recover, and the open says
// what it dropped and keeps those bytes in lost/.
TEST(StoreDamageTest, TornLogTailIsToleratedReportedAndEarlierWritesSurvive) {
  TempDir dir;
  const std::string log = logged_versions(dir, 20);
  ASSERT_FALSE(log.empty());
  const std::uint64_t size = fs::file_size(log) - 40;
  testing::truncate_to(log, size);  // inside the last record
  auto s = RocksDbStore::open(dir / "image");
  ASSERT_TRUE(s) << s.error().message;
  auto held = versions_held(**s);
  EXPECT_EQ(held[2], 19) << "the 19 complete writes survive";
  EXPECT_EQ(held[1], 1) << "the cut one is not applied";
  ASSERT_EQ((*s)->open_warnings().size(), 1u);
  const std::string w = (*s)->open_warnings()[0];
  EXPECT_NE(w.find("replay stopped"), std::string::npos) << w;
  const auto kept = testing::store_files(dir / "image/lost", fs::path(log).filename().string());
  ASSERT_EQ(kept.size(), 1u) << w;
  EXPECT_GT(fs::file_size(kept[0]), 0u);
  EXPECT_LT(fs::file_size(kept[0]), size / 10) << "about one record";
}

// A record that fails its checksum may be an acknowledged write: refused, not skipped (RocksDB's
// default, point-in-time recovery, would drop it and every write after it without a word).
// Recovery keeps the records before it and reports the bytes RocksDB dropped.
TEST(StoreDamageTest, LogRecordFailingItsChecksumIsRefusedThenReportedAsDropped) {
  for (const bool tail : {true, false}) {
    SCOPED_TRACE(tail ? "last record" : "a middle record");
    TempDir dir;
    const std::string log = logged_versions(dir, 20);
    ASSERT_FALSE(log.empty());
    // 30 bytes before the end: the last record's payload. In the middle: 1/3 of the way into
    // the record that holds the log's midpoint (its payload, past the 7-byte header).
    const std::int64_t size = std::int64_t(fs::file_size(log));
    testing::garble(log, tail ? -30 : size / 2 + size / 20 / 3, 4);
    expect_refused_with_hint(dir / "image", "checksum mismatch");
    auto r = recover_store(dir / "image");
    ASSERT_TRUE(r) << r.error().message;
    EXPECT_TRUE(r->report.lossy());
    ASSERT_FALSE(r->report.rocksdb_warnings.empty()) << r->report.summary();
    EXPECT_NE(r->report.summary().find("dropping"), std::string::npos) << r->report.summary();
    auto held = versions_held(*r->store);
    EXPECT_GT(held[2], 0);
    EXPECT_LT(held[2], 20);
    EXPECT_EQ(held[1] + held[2], 20) << "the others are back at version 1";
  }
}

// A record header whose length points past the end of the log's last block looks exactly like
// a torn write, and RocksDB drops it and the rest of the block: the open says so and keeps the
// bytes (they can be inspected; the writes before survive).
TEST(StoreDamageTest, DamagedLogRecordHeaderIsReportedNotSilent) {
  TempDir dir;
  const std::string log = logged_versions(dir, 20);
  ASSERT_FALSE(log.empty());
  // Walk 10 records (each: crc32c 4, length 2 little-endian, type 1, payload; the log is one
  // block) to the 11th's header, and garble its length field.
  const std::uint64_t size = fs::file_size(log);
  std::uint64_t at = 0;
  {
    std::ifstream in(log, std::ios::binary);
    for (int i = 0; i < 10; ++i) {
      unsigned char h[7];
      in.seekg(std::streamoff(at));
      in.read(reinterpret_cast<char*>(h), 7);
      at += 7 + (h[4] | (h[5] << 8));
    }
  }
  ASSERT_LT(at, size);
  testing::garble(log, std::int64_t(at + 4), 2);
  auto s = RocksDbStore::open(dir / "image");
  ASSERT_TRUE(s) << s.error().message;
  ASSERT_EQ((*s)->open_warnings().size(), 1u);
  EXPECT_NE((*s)->open_warnings()[0].find(std::to_string(size - at) + " bytes"), std::string::npos)
      << (*s)->open_warnings()[0];
  auto held = versions_held(**s);
  EXPECT_EQ(held[2], 10);
  EXPECT_EQ(held[1], 10);
}

// A read-only open sees a crash image as the next start would (the logged writes replayed in
// memory) and changes nothing in it: what the crash harness inspects between a kill and the
// restart.
TEST(StoreDamageTest, ReadOnlyOpenOfACrashImageChangesNothing) {
  TempDir dir;
  const std::string log = logged_versions(dir, 20);
  ASSERT_FALSE(log.empty());
  const auto files = [&] {
    std::vector<std::pair<std::string, std::uintmax_t>> out;
    for (const auto& f : testing::store_files(dir / "image", ""))
      if (!fs::path(f).filename().string().starts_with("LOG"))
        out.emplace_back(f, fs::file_size(f));
    return out;
  };
  const auto before = files();
  {
    auto s = RocksDbStore::open(dir / "image", {.read_only = true});
    ASSERT_TRUE(s) << s.error().message;
    EXPECT_EQ(versions_held(**s), (std::map<int, int>{{2, 20}}));
    EXPECT_FALSE(put_winner(**s, versioned(0, 3)));
  }
  EXPECT_EQ(files(), before);
  EXPECT_FALSE(RocksDbStore::open(dir / "absent", {.read_only = true}));
  EXPECT_FALSE(fs::exists(dir / "absent"));
}

// A record RocksDB reads but ktune cannot decode fails the first scan; recovery moves it out to
// lost/ and reports it.
TEST(StoreDamageTest, UndecodableRecordIsMovedOutAndReported) {
  TempDir dir;
  const std::string path = dir / "db";
  make_store(path, 5);
  {
    auto s = RocksDbStore::open(path);
    ASSERT_TRUE(s);
    ASSERT_TRUE((*s)->put(Table::winners, "dev/bad", "\x01{torn", Durability::sync));
    auto all = scan_winners(**s);
    ASSERT_FALSE(all);
    EXPECT_NE(with_recover_hint(all.error()).message.find("--recover"), std::string::npos);
  }
  auto r = recover_store(path);
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_FALSE(r->report.repaired) << "RocksDB's files were fine";
  ASSERT_EQ(r->report.undecodable.size(), 1u);
  EXPECT_EQ(r->report.undecodable[0].key, "dev/bad");
  EXPECT_TRUE(r->report.lossy());
  EXPECT_TRUE(fs::exists(path + "/" + r->report.undecodable_file));
  std::ifstream moved(path + "/" + r->report.undecodable_file);
  std::string line;
  std::getline(moved, line);
  EXPECT_NE(line.find("\"key_hex\":\"6465762f626164\""), std::string::npos) << line;
  EXPECT_EQ(scan_winners(*r->store)->size(), 5u);
}

// The meta table's only file lost: the format version is written again, and said so.
TEST(StoreDamageTest, LostFormatVersionIsRestoredAndReported) {
  TempDir dir;
  const std::string path = dir / "db";
  make_store(path, 5);
  const std::string meta = testing::newest_table_file(path, "meta", true);
  ASSERT_FALSE(meta.empty());
  testing::truncate_to(meta, 10);
  auto r = recover_store(path);
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_TRUE(r->report.format_version_restored);
  EXPECT_TRUE(r->report.lossy());
  EXPECT_EQ(scan_winners(*r->store)->size(), 5u);
  EXPECT_EQ(r->store->get(Table::meta, "format_version")->value_or(""), "1");
}

// Opens the store at `path` with RocksDB directly (every ktune family), for faults only RocksDB's
// own API can make.
struct RawStore {
  explicit RawStore(const std::string& path) {
    rocksdb::Options o;
    std::vector<rocksdb::ColumnFamilyDescriptor> families;
    families.emplace_back(rocksdb::kDefaultColumnFamilyName, rocksdb::ColumnFamilyOptions());
    for (Table t : k_all_tables)
      families.emplace_back(std::string(table_name(t)), rocksdb::ColumnFamilyOptions());
    rocksdb::DB* raw = nullptr;
    EXPECT_TRUE(rocksdb::DB::Open(o, path, families, &handles, &raw).ok());
    db.reset(raw);
  }
  ~RawStore() {
    for (auto* h : handles) db->DestroyColumnFamilyHandle(h);
  }
  rocksdb::ColumnFamilyHandle* table(Table t) const { return handles[1 + size_t(t)]; }
  std::unique_ptr<rocksdb::DB> db;
  std::vector<rocksdb::ColumnFamilyHandle*> handles;
};

// A repair can fail: this RocksDB build runs its consistency checks always, and RepairDB (which
// puts every table file at level 0) fails them when two files of a table hold overlapping
// sequence ranges. Made here: a log that outlived the flush of its records (flushes left running
// while writes arrive), which RepairDB turns into a second copy of them. The store must then be
// exactly as it was: still refused, never an empty store in its place, the failure said plainly.
TEST(StoreDamageTest, RepairThatFailsLeavesTheStoreAsItWas) {
  TempDir dir;
  const std::string path = dir / "db";
  make_store(path, 5);
  bool leftover = false;
  for (int attempt = 0; attempt < 5 && !leftover; ++attempt) {
    {
      RawStore raw(path);
      rocksdb::WriteOptions sync;
      sync.sync = true;
      std::vector<rocksdb::ColumnFamilyHandle*> tables;
      for (Table t : k_all_tables) {
        ASSERT_TRUE(raw.db->Put(sync, raw.table(t), "x" + std::to_string(attempt), "v").ok());
        tables.push_back(raw.table(t));
      }
      rocksdb::FlushOptions background;
      background.wait = false;
      ASSERT_TRUE(raw.db->Flush(background, tables).ok());
      rocksdb::WriteBatch batch;
      for (int i = 0; i < 20; ++i)
        batch.Put(raw.table(Table::trials), "t" + std::to_string(attempt * 100 + i), "v");
      ASSERT_TRUE(raw.db->Write(sync, &batch).ok());
      ASSERT_TRUE(raw.db->Flush(rocksdb::FlushOptions(), tables).ok());
    }
    for (const auto& log : testing::store_files(path, "", ".log"))
      leftover = leftover || fs::file_size(log) > 0;
  }
  ASSERT_TRUE(leftover) << "no log outlived its flushed records in 5 attempts";
  for (const auto& m : testing::store_files(path, "MANIFEST-")) fs::remove(m);
  // The store's files (RocksDB's info logs, LOG*, rotate at every open attempt).
  const auto store_files = [&] {
    auto files = testing::store_files(path, "");
    std::erase_if(files, [](const std::string& f) {
      return fs::path(f).filename().string().starts_with("LOG");
    });
    return files;
  };
  const auto before = store_files();
  auto r = recover_store(path);
  ASSERT_FALSE(r) << r->report.summary();
  EXPECT_NE(r.error().message.find("L0 file"), std::string::npos) << r.error().message;
  EXPECT_NE(r.error().message.find("the store was not changed"), std::string::npos)
      << r.error().message;
  EXPECT_EQ(store_files(), before);
  EXPECT_FALSE(fs::exists(path + ".repairing"));
  expect_refused_with_hint(path, "MANIFEST");
}

TEST(StoreDamageTest, HealthyStoreIsLeftAlone) {
  TempDir dir;
  const std::string path = dir / "db";
  make_store(path, 5, 2);
  auto r = recover_store(path);
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_FALSE(r->report.repaired);
  EXPECT_FALSE(r->report.lossy());
  EXPECT_EQ(r->report.summary(), "no damage found; the store is unchanged\n");
  EXPECT_FALSE(fs::exists(path + "/lost"));
}

TEST(StoreDamageTest, NothingToRecoverIsAnErrorAndCreatesNothing) {
  TempDir dir;
  auto r = recover_store(dir / "absent");
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::not_found);
  EXPECT_FALSE(fs::exists(dir / "absent"));
}

TEST(StoreDamageTest, DirectoryOfOtherFilesIsNotMadeAStore) {
  TempDir dir;
  fs::create_directories(dir / "db");
  std::ofstream(dir / "db/notes.txt") << "mine";
  auto s = RocksDbStore::open(dir / "db");
  ASSERT_FALSE(s);
  EXPECT_EQ(s.error().code, ErrorCode::invalid_argument);
  EXPECT_NE(s.error().message.find("notes.txt"), std::string::npos) << s.error().message;
  EXPECT_FALSE(fs::exists(dir / "db/CURRENT"));
}

TEST(StoreDamageTest, EveryTableHasAFileFromTheStart) {
  TempDir dir;
  const std::string path = dir / "db";
  make_store(path, 0);
  expect_every_table_has_a_file(path);
  auto s = RocksDbStore::open(path);
  ASSERT_TRUE(s);
  for (Table t : k_all_tables) {
    int seen = 0;
    ASSERT_TRUE((*s)->scan(t, "", [&](std::string_view, std::string_view) {
      ++seen;
      return true;
    }));
    EXPECT_EQ(seen, t == Table::meta ? 2 : 0) << table_name(t);
  }
}

}  // namespace
}  // namespace ktune
