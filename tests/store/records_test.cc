#include "store/records.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "store/mem_store.h"
#include "tests/fakes/test_records.h"

namespace ktune {
namespace {

TEST(RecordsTest, EncodingStartsWithVersionByte) {
  const auto bytes = encode(testing::winner(testing::gemm_problem(16, 4096, 4096), 20.0));
  ASSERT_FALSE(bytes.empty());
  EXPECT_EQ(std::uint8_t(bytes[0]), k_record_encoding);
  EXPECT_EQ(bytes[1], '{');
}

TEST(RecordsTest, UnknownEncodingVersionIsCorruption) {
  auto bytes = encode(testing::winner(testing::gemm_problem(16, 4096, 4096), 20.0));
  bytes[0] = 9;
  auto r = decode_winner(bytes);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::corruption);
  EXPECT_NE(r.error().message.find("unknown encoding version 9"), std::string::npos);
}

// A trial of the gemm template at 64x14336x4096 on an H200, its outcome and numbers unset.
TrialRecord gemm_trial() {
  TrialRecord t;
  t.device = testing::h200();
  t.problem = testing::gemm_problem(64, 14336, 4096);
  t.template_name = "gemm";
  t.template_hash = "fedcba9876543210";
  return t;
}

TEST(RecordsTest, TrialJobBlockRoundTrip) {
  TrialRecord t = gemm_trial();
  t.params = {{"SPLIT_K", 4}, {"BLOCK_M", 64}};
  t.outcome = Outcome::resource_error;
  t.message = "too many resources requested for launch";
  t.timestamp = 42;
  t.job_id = "000007";
  auto tb = decode_trial(encode(t));
  ASSERT_TRUE(tb) << tb.error().message;
  EXPECT_EQ(*tb, t);
  // Telemetry is written only when sampled: a record without it encodes as older daemons' did
  // and reads back as 0; one with it round-trips.
  EXPECT_EQ(encode(t).find("sm_clock_mhz"), std::string::npos);
  EXPECT_EQ(encode(t).find("power_w"), std::string::npos);
  t.outcome = Outcome::ok;
  t.median_us = 1651.6;
  t.sm_clock_mhz = 1410;
  t.power_w = 691.9;
  EXPECT_EQ(encode(t).find("sm_clock_counted_mhz"), std::string::npos) << "not counted: no field";
  t.sm_clock_counted_mhz = 1417;
  EXPECT_EQ(encode(t).find("mem_clock_mhz"), std::string::npos) << "not sampled: no field";
  t.mem_clock_mhz = 2619;
  EXPECT_EQ(encode(t).find("timing_l2"), std::string::npos) << "unknown timing: no field";
  t.timing_l2 = TimingL2::rotated;
  auto timed = decode_trial(encode(t));
  ASSERT_TRUE(timed) << timed.error().message;
  EXPECT_EQ(*timed, t);
  EXPECT_EQ(timed->sm_clock_mhz, 1410);
  EXPECT_EQ(timed->sm_clock_counted_mhz, 1417);
  EXPECT_EQ(timed->mem_clock_mhz, 2619);
  EXPECT_EQ(timed->timing_l2, TimingL2::rotated);

  JobRecord j;
  j.id = "000007";
  j.device = testing::h200();
  j.problem = t.problem;
  j.strategy = "anneal";
  j.budget_trials = 100;
  j.budget_seconds = 60;
  j.state = JobState::running;
  j.origin = "miss";
  j.priority = 1.5;
  auto jb = decode_job(encode(j));
  ASSERT_TRUE(jb) << jb.error().message;
  EXPECT_EQ(*jb, j);
  // A job without templates or seeds writes neither key (records of older daemons read the same).
  EXPECT_EQ(encode(j).find("templates"), std::string::npos);
  EXPECT_EQ(encode(j).find("seeds"), std::string::npos);
  j.templates = {"gemm_tma", "gemm_sm90"};
  j.seeds = {{{"BLOCK_M", 128}, {"STAGES", 4}}, {{"BLOCK_M", 64}}};
  auto js = decode_job(encode(j));
  ASSERT_TRUE(js) << js.error().message;
  EXPECT_EQ(*js, j);
  std::string bad_seeds = encode(j);
  const auto at = bad_seeds.find("\"seeds\":[");
  ASSERT_NE(at, std::string::npos);
  bad_seeds.replace(at, 9, "\"seeds\":[7,");
  auto refused = decode_job(bad_seeds);
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code, ErrorCode::corruption);
  EXPECT_NE(refused.error().message.find("seeds[0]"), std::string::npos) << refused.error().message;

  BlockEntry b{"fedcba9876543210", "sm_90", "580.159.03", {{"BLOCK_M", 256}}, Outcome::crash,
               "illegal address",  7};
  auto bb = decode_block(encode(b));
  ASSERT_TRUE(bb);
  EXPECT_EQ(*bb, b);
  EXPECT_EQ(b.key(), "fedcba9876543210/sm_90/580.159.03/BLOCK_M=256");
}

// A winner carries the SM clock counted after its winning config's timing when it was counted;
// a record without one (not counted, or written before 2026-12-06) encodes without the field.
TEST(RecordsTest, WinnerCountedClockRoundTripsAndIsAbsentWhenNotCounted) {
  WinnerRecord w = testing::winner(testing::gemm_problem(4096, 4096, 4096), 180.0);
  ASSERT_EQ(w.sm_clock_counted_mhz, 0);
  EXPECT_EQ(encode(w).find("sm_clock_counted_mhz"), std::string::npos);
  w.sm_clock_counted_mhz = 1417;
  const std::string bytes = encode(w);
  EXPECT_NE(bytes.find("\"sm_clock_counted_mhz\":1417"), std::string::npos) << bytes;
  auto back = decode_winner(bytes);
  ASSERT_TRUE(back) << back.error().message;
  EXPECT_EQ(*back, w);
}

// A winner says how its medians were timed when it knows; one that does not (written before
// 2026-12-05) encodes without the field, as then, and a name no ktune writes is corruption.
TEST(RecordsTest, WinnerTimingRoundTripsAndIsAbsentWhenUnknown) {
  WinnerRecord w = testing::winner(testing::gemm_problem(4096, 4096, 4096), 180.0);
  ASSERT_EQ(w.timing_l2, TimingL2::unknown);
  EXPECT_EQ(encode(w).find("timing_l2"), std::string::npos);
  auto back = decode_winner(encode(w));
  ASSERT_TRUE(back) << back.error().message;
  EXPECT_EQ(back->timing_l2, TimingL2::unknown);
  for (TimingL2 t : {TimingL2::flushed, TimingL2::rotated}) {
    w.timing_l2 = t;
    const std::string bytes = encode(w);
    EXPECT_NE(bytes.find("\"timing_l2\":\"" + std::string(to_string(t)) + "\""), std::string::npos);
    auto timed = decode_winner(bytes);
    ASSERT_TRUE(timed) << timed.error().message;
    EXPECT_EQ(*timed, w);
  }
  std::string warm = encode(w);
  warm.replace(warm.find("rotated"), 7, "warm");
  auto refused = decode_winner(warm);
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code, ErrorCode::corruption);
  EXPECT_NE(refused.error().message.find("timing_l2: unknown timing_l2 'warm'"), std::string::npos)
      << refused.error().message;
  // Persisted by name; the numbers are the in-memory values and never change.
  EXPECT_EQ(int(TimingL2::unknown), 0);
  EXPECT_EQ(int(TimingL2::flushed), 1);
  EXPECT_EQ(int(TimingL2::rotated), 2);
}

TEST(RecordsTest, OutcomeNamesAreStable) {
  // Persisted: these spellings and numbers must never change.
  EXPECT_EQ(int(Outcome::ok), 0);
  EXPECT_EQ(int(Outcome::in_flight), 7);
  EXPECT_EQ(to_string(Outcome::wrong_result), "wrong_result");
  EXPECT_EQ(*parse_outcome("timeout"), Outcome::timeout);
  EXPECT_FALSE(parse_outcome("exploded"));
  EXPECT_EQ(int(JobState::cancelled), 4);
}

TEST(RecordsTest, CubinTruncationDetected) {
  CubinEntry c{"_Z1k", 32, 0, 0, 0, 0, 1.0, std::string(100, 'x')};
  auto bytes = encode(c);
  auto ok = decode_cubin(bytes);
  ASSERT_TRUE(ok);
  EXPECT_EQ(*ok, c);
  bytes.resize(bytes.size() - 10);
  auto bad = decode_cubin(bytes);
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().code, ErrorCode::corruption);
}

TEST(RecordsTest, ValidateWinnerCatchesBadContent) {
  auto w = testing::winner(testing::gemm_problem(16, 16, 16), 1.0);
  EXPECT_TRUE(validate_winner(w));
  auto unsorted = w;
  std::swap(unsorted.ranked[0], unsorted.ranked[1]);
  EXPECT_FALSE(validate_winner(unsorted));
  auto zero = w;
  zero.ranked[0].median_us = 0;
  EXPECT_FALSE(validate_winner(zero));
  auto hash = w;
  hash.ranked[0].template_hash = "xyz";
  EXPECT_FALSE(validate_winner(hash));
  auto future = w;
  future.validators.store_format = 2;
  EXPECT_EQ(validate_winner(future).error().code, ErrorCode::format_mismatch);
  EXPECT_FALSE(put_winner(*std::make_unique<MemStore>(), zero));
  // A non-finite throughput or spread (a template metric that divided by zero) would be written
  // as null, which no reader takes back: refused before it is stored.
  for (double bad : {std::numeric_limits<double>::infinity(), std::nan("")}) {
    auto t = w;
    t.ranked[0].tflops = bad;
    EXPECT_FALSE(validate_winner(t)) << bad;
    auto s = w;
    s.ranked[1].spread_pct = bad;
    EXPECT_FALSE(validate_winner(s)) << bad;
    EXPECT_FALSE(put_winner(*std::make_unique<MemStore>(), t));
  }
}

// A wrong_result whose outputs were not finite has a +inf reference error: stored as the largest
// double (a number every reader takes) and read back as +inf; a finite error stays itself.
TEST(RecordsTest, ATrialWithNonFiniteOutputsRoundTrips) {
  TrialRecord t = gemm_trial();
  t.outcome = Outcome::wrong_result;
  t.ref_error = std::numeric_limits<double>::infinity();
  EXPECT_NE(encode(t).find("\"ref_error\":1.7976931348623157e+308"), std::string::npos)
      << encode(t);
  auto back = decode_trial(encode(t));
  ASSERT_TRUE(back) << back.error().message;
  EXPECT_EQ(*back, t);
  t.ref_error = 0.25;
  back = decode_trial(encode(t));
  ASSERT_TRUE(back) << back.error().message;
  EXPECT_EQ(back->ref_error, 0.25);
}

}  // namespace
}  // namespace ktune
