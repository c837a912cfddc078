// ktuned on a damaged store: every startup path that finds damage (opening, the format check,
// the first scan of winners) refuses with the `--recover` hint; `ktuned --recover` repairs,
// prints what it dropped or rolled back and exits 0 (nothing lost) or 2 (records lost or rolled
// back); the next start serves what was salvaged. Label "e2e".
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "client/client.h"
#include "store/records.h"
#include "store/rocksdb_store.h"
#include "tests/fakes/daemon_process.h"
#include "tests/fakes/store_faults.h"
#include "tests/fakes/test_records.h"

namespace ktune {
namespace {

namespace fs = std::filesystem;
using testing::DaemonProcess;
using testing::TempDir;

class StoreDamageE2eTest : public ::testing::Test {
 protected:
  std::string db() const { return m_dir / "state/db"; }

  // `versions` imports of `n` winners, each flushed to its own table file.
  void make_store(int n, int versions) {
    for (int v = 1; v <= versions; ++v) {
      auto s = RocksDbStore::open(db());
      ASSERT_TRUE(s) << s.error().message;
      WriteBatch batch;
      for (int i = 0; i < n; ++i) {
        const WinnerRecord w = testing::winner(testing::gemm_problem(16 + i, 4096, 4096), 100.0 - v,
                                               "node-a", 1'790'000'000 + v);
        batch.put(Table::winners, w.key(), encode(w));
      }
      ASSERT_TRUE((*s)->write(batch, Durability::sync));
    }
  }
  // Runs ktuned to its exit (a refused start, or --recover); returns (exit code, its output).
  std::pair<int, std::string> run_ktuned(const std::string& extra = "") const {
    return testing::run_command(testing::ktuned_path() + " --data-dir " + (m_dir / "state") +
                                " --socket " + (m_dir / "ktuned.sock") +
                                " --set store.seed_tables= --set server.metrics=127.0.0.1:0 " +
                                extra + " 2>&1");
  }
  // Starts ktuned (it must start) and returns how many winners it serves.
  int winners_served() const {
    DaemonProcess d(m_dir / "ktuned.sock", m_dir / "state");
    if (!d.start()) return -1;
    ClientOptions o;
    o.socket_path = m_dir / "ktuned.sock";
    Client c(o);
    auto s = c.status();
    return s ? (*s)["winners"].get<int>() : -1;
  }
  void expect_refused(const std::string& what) const {
    auto [rc, out] = run_ktuned();
    EXPECT_EQ(rc, 1) << out;
    EXPECT_NE(out.find(what), std::string::npos) << out;
    EXPECT_NE(out.find("ktuned --recover"), std::string::npos) << out;
  }

  TempDir m_dir;
};

// Issue 9: `rm db/CURRENT db/*.log`, start: it used to start empty (winners=0), the table files
// deleted. Now it refuses; --recover rebuilds from the table files and nothing is lost.
TEST_F(StoreDamageE2eTest, MissingCurrentIsRefusedThenRecoveredWithEveryWinner) {
  make_store(50, 1);
  fs::remove(db() + "/CURRENT");
  for (const auto& log : testing::store_files(db(), "", ".log")) fs::remove(log);
  expect_refused("no CURRENT file");
  expect_refused("no CURRENT file");
  auto [rc, out] = run_ktuned("--recover");
  EXPECT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("nothing was lost"), std::string::npos) << out;
  EXPECT_NE(out.find("recovery_done"), std::string::npos) << "a structured log line: " << out;
  EXPECT_EQ(winners_served(), 50);
}

// Issue 9: a garbled newest table file; --recover used to print only "ready ... winners=N" while
// the newest import silently went back to the one before. The first scan now refuses with the
// hint, and --recover says what rolled back and exits 2.
TEST_F(StoreDamageE2eTest, GarbledTableFileIsRefusedAtLoadThenReportedAsRolledBack) {
  make_store(200, 2);
  const std::string newest = testing::newest_table_file(db(), "winners");
  ASSERT_FALSE(newest.empty());
  testing::garble(newest, std::int64_t(fs::file_size(newest) / 3), 64);
  expect_refused("checksum mismatch");
  auto [rc, out] = run_ktuned("--recover");
  EXPECT_EQ(rc, 2) << out;
  EXPECT_NE(out.find("lost/" + fs::path(newest).filename().string()), std::string::npos) << out;
  EXPECT_NE(out.find(" rolled back (an older value is served now)"), std::string::npos) << out;
  EXPECT_NE(out.find("recovery_dropped_file"), std::string::npos) << out;
  EXPECT_NE(out.find("result: records were lost or rolled back"), std::string::npos) << out;
  EXPECT_EQ(winners_served(), 200);
}

TEST_F(StoreDamageE2eTest, UndecodableWinnerIsRefusedAtLoadThenMovedOut) {
  make_store(5, 1);
  {
    auto s = RocksDbStore::open(db());
    ASSERT_TRUE(s);
    ASSERT_TRUE((*s)->put(Table::winners, "dev/bad", "\x01{torn", Durability::sync));
  }
  expect_refused("winners key 'dev/bad'");
  auto [rc, out] = run_ktuned("--recover");
  EXPECT_EQ(rc, 2) << out;
  EXPECT_NE(out.find("undecodable winners record 'dev/bad' moved to lost/undecodable-"),
            std::string::npos)
      << out;
  EXPECT_EQ(winners_served(), 5);
}

TEST_F(StoreDamageE2eTest, MissingFormatVersionIsRefusedThenRestored) {
  make_store(5, 1);
  {
    auto s = RocksDbStore::open(db());
    ASSERT_TRUE(s);
    ASSERT_TRUE((*s)->remove(Table::meta, "format_version", Durability::sync));
  }
  expect_refused("no format version");
  auto [rc, out] = run_ktuned("--recover");
  EXPECT_EQ(rc, 2) << out;
  EXPECT_NE(out.find("format version was lost"), std::string::npos) << out;
  EXPECT_EQ(winners_served(), 5);
}

TEST_F(StoreDamageE2eTest, RecoverOnAHealthyStoreChangesNothing) {
  make_store(5, 2);
  auto [rc, out] = run_ktuned("--recover");
  EXPECT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("no damage found; the store is unchanged"), std::string::npos) << out;
  EXPECT_FALSE(fs::exists(db() + "/lost"));
  EXPECT_EQ(winners_served(), 5);
}

TEST_F(StoreDamageE2eTest, RecoverWithNoStoreCreatesNone) {
  auto [rc, out] = run_ktuned("--recover");
  EXPECT_EQ(rc, 1) << out;
  EXPECT_NE(out.find("nothing to recover"), std::string::npos) << out;
  EXPECT_FALSE(fs::exists(db() + "/CURRENT"));
}

}  // namespace
}  // namespace ktune
