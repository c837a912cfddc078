// WinnerIndex::nearest and the ShapeTree under it: the same answers as scanning every record of
// the family (issue 10: "nearest-shape search stays sub-linear as the index grows"), checked on
// thousands of random queries with many equal distances, and work that stays small at 100k
// winners in one family.
#include "daemon/winner_index.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <latch>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <thread>

#include "tests/fakes/test_records.h"
#include "tests/fakes/test_volume.h"

namespace ktune {
namespace {

const std::string k_device = testing::h200().id();

// The reference: what WinnerIndex::nearest did before the tree, a scan of the whole family (keys
// and log2 dims computed once, as the old index kept them).
struct Scanned {
  std::string key;
  std::vector<double> log2_dims;
};
std::vector<Scanned> scanned(const std::vector<Problem>& family) {
  std::vector<Scanned> out;
  for (const auto& p : family) {
    out.push_back({p.key(), {}});
    for (const auto& [_, v] : p.dims) out.back().log2_dims.push_back(std::log2(double(v)));
  }
  return out;
}
std::vector<std::pair<std::string, double>> brute_force(const std::vector<Scanned>& family,
                                                        const Problem& target, double radius,
                                                        size_t max) {
  std::vector<double> t;
  for (const auto& [_, v] : target.dims) t.push_back(std::log2(double(v)));
  std::vector<std::pair<const std::string*, double>> in;
  for (const auto& e : family) {
    double d = 0;
    for (size_t i = 0; i < t.size(); ++i) d += std::abs(t[i] - e.log2_dims[i]);
    if (d > 0 && d <= radius) in.emplace_back(&e.key, d);
  }
  std::sort(in.begin(), in.end(), [](const auto& a, const auto& b) {
    return a.second != b.second ? a.second < b.second : *a.first < *b.first;
  });
  std::vector<std::pair<std::string, double>> out;
  for (size_t i = 0; i < in.size() && i < max; ++i) out.emplace_back(*in[i].first, in[i].second);
  return out;
}

std::vector<std::pair<std::string, double>> tree_answer(const WinnerIndex& index,
                                                        const Problem& target, double radius,
                                                        size_t max) {
  std::vector<std::pair<std::string, double>> out;
  for (const auto& n : index.nearest(k_device, target, radius, max))
    out.emplace_back(n.record->problem.key(), n.distance);
  return out;
}

// A family drawn so that many distances tie: dims mostly powers of two (integral log2), some
// multiples of 64 and a few arbitrary values.
Problem random_shape(std::mt19937_64& rng) {
  auto dim = [&]() -> std::int64_t {
    switch (rng() % 4) {
      case 0:
      case 1:
        return std::int64_t(1) << (rng() % 15);
      case 2:
        return 64 * std::int64_t(1 + rng() % 128);
      default:
        return std::int64_t(1 + rng() % 9000);
    }
  };
  return testing::gemm_problem(dim(), dim(), dim());
}

struct Family {
  WinnerIndex index;
  std::vector<Problem> problems;
};

void fill(Family& f, std::mt19937_64& rng, size_t n) {
  std::set<std::string> keys;
  for (const auto& p : f.problems) keys.insert(p.key());
  std::vector<WinnerRecord> batch;
  while (batch.size() < n) {
    Problem p = random_shape(rng);
    if (!keys.insert(p.key()).second) continue;
    f.problems.push_back(p);
    batch.push_back(testing::winner(p, 10));
  }
  f.index.upsert(std::move(batch));
}

TEST(NearestTest, SameAnswersAsTheLinearScanOnRandomQueriesWithTies) {
  std::mt19937_64 rng(1);
  Family f;
  fill(f, rng, 5000);
  const auto reference = scanned(f.problems);
  const double radii[] = {0.25, 1.0, 2.0, 3.5, 8.0, 64.0};
  const size_t maxima[] = {1, 4, 64, 100'000};
  size_t ties = 0;
  size_t compared = 0;
  for (int q = 0; q < testing::volume(3000); ++q) {
    // Half the queries sit on a member's coordinates in some dims (distance-0 terms, exact ties).
    Problem target = random_shape(rng);
    if (q % 2)
      target.dims[rng() % 3].second = f.problems[rng() % f.problems.size()].dims[rng() % 3].second;
    if (q % 7 == 0) target = f.problems[rng() % f.problems.size()];  // a member: excluded itself
    const double radius = radii[rng() % std::size(radii)];
    const size_t max = maxima[rng() % std::size(maxima)];
    const auto want = brute_force(reference, target, radius, max);
    const auto got = tree_answer(f.index, target, radius, max);
    ASSERT_EQ(got, want) << target.key() << " radius " << radius << " max " << max;
    for (size_t i = 1; i < want.size(); ++i) ties += want[i].second == want[i - 1].second;
    compared += want.size();
  }
  EXPECT_GT(ties, size_t(testing::volume(10'000))) << "the queries exercise equal distances";
  EXPECT_GT(compared, size_t(testing::volume(100'000)));
}

// Records added one at a time (the tree's unbuilt tail, and its rebuilds) and records replaced in
// place (same problem, new measurement) answer like the scan too.
TEST(NearestTest, SameAnswersWhileGrowingOneRecordAtATime) {
  std::mt19937_64 rng(2);
  Family f;
  fill(f, rng, 300);
  std::set<std::string> keys;
  for (const auto& p : f.problems) keys.insert(p.key());
  auto reference = scanned(f.problems);
  for (int step = 0; step < testing::volume(3000); ++step) {
    if (step % 3 == 0) {
      Problem p = random_shape(rng);
      if (keys.insert(p.key()).second) {
        f.problems.push_back(p);
        reference.push_back(scanned({p}).front());
        f.index.upsert(testing::winner(p, 10));
      }
    } else if (step % 3 == 1) {  // a new measurement of a known problem
      const Problem& p = f.problems[rng() % f.problems.size()];
      f.index.upsert(testing::winner(p, 5 + double(step)));
      auto near = f.index.nearest(k_device, random_shape(rng), 64, 100'000);
      for (const auto& n : near)
        ASSERT_EQ(n.record, f.index.exact(k_device, n.record->problem)) << "a replaced record";
    }
    const Problem target = random_shape(rng);
    ASSERT_EQ(tree_answer(f.index, target, 2.0, 4), brute_force(reference, target, 2.0, 4)) << step;
  }
  EXPECT_EQ(f.index.size(), f.problems.size());
}

TEST(NearestTest, OneAndTwoDimFamiliesAndFamiliesApart) {
  WinnerIndex index;
  std::vector<WinnerRecord> records;
  std::vector<Problem> sums, rows;
  for (std::int64_t n = 1; n <= 4096; n += 3) {
    sums.push_back(Problem{"reduce_sum", "fp32", "fp32", "", {{"n", n * 1000}}});
    rows.push_back(
        Problem{"softmax", "bf16", "bf16", "", {{"rows", n}, {"cols", 8 * (n % 64 + 1)}}});
    records.push_back(testing::winner(sums.back(), 1));
    records.push_back(testing::winner(rows.back(), 1));
  }
  index.load(records);
  const auto sums_scanned = scanned(sums);
  const auto rows_scanned = scanned(rows);
  std::mt19937_64 rng(3);
  for (int q = 0; q < 500; ++q) {
    const Problem s{"reduce_sum", "fp32", "fp32", "", {{"n", std::int64_t(1 + rng() % 5'000'000)}}};
    const Problem r{
        "softmax",
        "bf16",
        "bf16",
        "",
        {{"rows", std::int64_t(1 + rng() % 5000)}, {"cols", std::int64_t(8 + rng() % 600)}}};
    ASSERT_EQ(tree_answer(index, s, 1.0, 8), brute_force(sums_scanned, s, 1.0, 8)) << s.key();
    ASSERT_EQ(tree_answer(index, r, 2.0, 8), brute_force(rows_scanned, r, 2.0, 8)) << r.key();
  }
  const Problem other_dtype{"reduce_sum", "bf16", "bf16", "", {{"n", 1000}}};
  EXPECT_TRUE(index.nearest(k_device, other_dtype, 64, 100).empty());
}

// 100,000 winners in one family (gemm, M from 1..8192 as in LLM serving, N and K multiples of 64):
// the answers match the scan, and a search computes a few hundred distances, not 100,000.
// (Sanitizer builds run an eighth of the volume: 12,500 winners, 25 queries.)
TEST(NearestTest, SubLinearAt100kWinnersInOneFamily) {
  std::mt19937_64 rng(4);
  auto shape = [&] {
    return testing::gemm_problem(std::int64_t(1 + rng() % 8192), 64 * std::int64_t(1 + rng() % 256),
                                 64 * std::int64_t(1 + rng() % 256));
  };
  std::vector<WinnerRecord> records;
  std::vector<Problem> problems;
  std::set<std::string> keys;
  ShapeTree tree(3);
  while (problems.size() < size_t(testing::volume(100'000))) {
    Problem p = shape();
    if (!keys.insert(p.key()).second) continue;
    std::vector<double> point;
    for (const auto& [_, v] : p.dims) point.push_back(std::log2(double(v)));
    tree.add(point, p.key());
    problems.push_back(p);
    records.push_back(testing::winner(p, 10));
  }
  tree.settle();
  WinnerIndex index;
  index.load(std::move(records));
  const auto reference = scanned(problems);
  std::vector<size_t> points;
  for (int q = 0; q < testing::volume(200); ++q) {
    const Problem target = shape();
    ASSERT_EQ(tree_answer(index, target, 2.0, 4), brute_force(reference, target, 2.0, 4))
        << target.key();
    std::vector<double> t;
    for (const auto& [_, v] : target.dims) t.push_back(std::log2(double(v)));
    ShapeTree::Work work;
    tree.nearest(t, 2.0, 4, &work);
    points.push_back(work.points);
  }
  std::sort(points.begin(), points.end());
  EXPECT_LT(points[points.size() / 2], 1000u) << "median distances computed per search";
  EXPECT_LT(points[points.size() * 99 / 100], 5000u) << "p99 distances computed per search";
  // Every lookup that names a device resolves it against device_ids(): that must not cost a
  // scan of the index either (it took ~25 ms per call here, most of a cold lookup).
  std::vector<double> us;
  for (int i = 0; i < 20; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    const auto ids = index.device_ids();
    us.push_back(
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
    ASSERT_EQ(ids, std::vector<std::string>{k_device});
  }
  EXPECT_LT(*std::min_element(us.begin(), us.end()), 200.0) << "fastest device_ids() in us";
}

TEST(NearestTest, DeviceIdsFollowLoadsAndUpserts) {
  WinnerIndex index;
  WinnerRecord a100 = testing::winner(testing::gemm_problem(64, 64, 64), 1);
  a100.device = DeviceClass{"NVIDIA A100-SXM4-80GB", 80, 108, 80};
  index.load({testing::winner(testing::gemm_problem(64, 64, 64), 1)});
  EXPECT_EQ(index.device_ids(), std::vector<std::string>{k_device});
  // device_ids_version moves whenever the set may have changed, and only then (lookups keep
  // resolved device names until it moves).
  const auto v0 = index.device_ids_version();
  index.upsert(a100);
  const auto v1 = index.device_ids_version();
  EXPECT_NE(v1, v0) << "a new class";
  index.upsert(testing::winner(testing::gemm_problem(64, 64, 64), 2));  // replaces: no new id
  index.upsert(testing::winner(testing::gemm_problem(128, 64, 64), 2));  // a known class
  EXPECT_EQ(index.device_ids_version(), v1);
  EXPECT_EQ(index.device_ids(), (std::vector<std::string>{a100.device.id(), k_device}));
  index.load({a100});
  EXPECT_NE(index.device_ids_version(), v1) << "a load";
  EXPECT_EQ(index.device_ids(), std::vector<std::string>{a100.device.id()});
}

// Each neighbour carries its best config's hash (lookups list a config once without reading the
// records that repeat it): equal for equal template and params, apart otherwise, and following an
// upsert that replaces the record.
TEST(NearestTest, NeighboursCarryTheirBestConfigsHash) {
  auto with = [](std::int64_t m, std::int64_t stages, const std::string& tmpl = "gemm") {
    WinnerRecord w = testing::winner(testing::gemm_problem(m, 4096, 4096), 1);
    w.ranked[0].template_name = tmpl;
    w.ranked[0].params["STAGES"] = stages;
    w.ranked[1].params["STAGES"] = 7;  // only the best config counts
    return w;
  };
  WinnerIndex index;
  index.load({with(32, 4), with(128, 4), with(8, 3), with(512, 4, "gemm_sm90")});
  const auto hash_of = [&](std::int64_t m) {
    for (const auto& n : index.nearest(k_device, testing::gemm_problem(64, 4096, 4096), 4.0, 8))
      if (n.record->problem.dim("M") == m) return n.config;
    ADD_FAILURE() << "no neighbour M=" << m;
    return std::uint64_t{0};
  };
  EXPECT_EQ(hash_of(32), WinnerIndex::config_hash(with(32, 4)));
  EXPECT_EQ(hash_of(32), hash_of(128)) << "same template and params";
  EXPECT_NE(hash_of(32), hash_of(8)) << "a param differs";
  EXPECT_NE(hash_of(32), hash_of(512)) << "the template differs";
  index.upsert(with(128, 3));
  EXPECT_EQ(hash_of(128), hash_of(8)) << "replaced record";
  EXPECT_EQ(WinnerIndex::config_hash(WinnerRecord{}), 0u);
}

// Issue 14: what changed since a generation, as far as one answer is concerned.
TEST(ChangeLogTest, UntouchedSinceSeesTheFamilyWithinTheRadiusOnly) {
  WinnerIndex index;
  const Problem a = testing::gemm_problem(512, 4096, 4096);
  index.load({testing::winner(testing::gemm_problem(64, 64, 64), 1)});
  const auto g0 = index.generation();
  EXPECT_EQ(index.untouched_since(k_device, a, g0, 2.0), g0) << "nothing changed";
  index.upsert(
      testing::winner(testing::gemm_problem(512, 4096, 4096, "fp16"), 1));   // another family
  index.upsert(testing::winner(testing::gemm_problem(512, 1024, 4096), 1));  // distance 2
  const auto g2 = index.generation();
  EXPECT_EQ(index.untouched_since(k_device, a, g0, 1.5), g2) << "other family; 2 > 1.5";
  EXPECT_EQ(index.untouched_since(k_device, a, g0, 2.0), std::nullopt) << "at the radius";
  EXPECT_EQ(index.untouched_since(k_device, a, g2, 2.0), g2) << "nothing since g2";
  index.upsert(testing::winner(a, 1));  // the key itself: distance 0
  EXPECT_EQ(index.untouched_since(k_device, a, g2, 0.0), std::nullopt);
  // Past the log's length, the oldest changes are forgotten: older answers are not vouched for.
  const auto g3 = index.generation();
  for (size_t i = 0; i < WinnerIndex::k_change_log; ++i)
    index.upsert(testing::winner(testing::gemm_problem(8, 8, std::int64_t(i + 1), "fp16"), 1));
  EXPECT_EQ(index.untouched_since(k_device, a, g3, 2.0), index.generation());
  index.upsert(testing::winner(testing::gemm_problem(8, 8, 1, "fp32"), 1));
  EXPECT_EQ(index.untouched_since(k_device, a, g3, 2.0), std::nullopt) << "log no longer reaches";
  EXPECT_EQ(index.untouched_since(k_device, a, g3 + 1, 2.0), index.generation());
  // Changes without a precise extent clear the log.
  const auto g4 = index.generation();
  index.invalidate_answers();
  EXPECT_EQ(index.described_since(), index.generation());
  EXPECT_EQ(index.untouched_since(k_device, a, g4, 2.0), std::nullopt) << "templates swapped";
  const auto g5 = index.generation();
  WinnerRecord other_device = testing::winner(testing::gemm_problem(8, 8, 8, "fp16"), 1);
  other_device.device = DeviceClass{"NVIDIA A100-SXM4-80GB", 80, 108, 80};
  index.upsert(other_device);
  EXPECT_EQ(index.untouched_since(k_device, a, g5, 2.0), std::nullopt) << "a new device class";
  const auto g6 = index.generation();
  std::vector<WinnerRecord> batch;
  for (size_t i = 0; i <= WinnerIndex::k_change_log; ++i)
    batch.push_back(testing::winner(testing::gemm_problem(16, 8, std::int64_t(i + 1), "fp16"), 1));
  index.upsert(std::move(batch));
  EXPECT_EQ(index.untouched_since(k_device, a, g6, 2.0), std::nullopt) << "import over the log";
  EXPECT_EQ(index.described_since(), index.generation());
}

// Batches built aside (more than k_in_place_batch records: a copy of the index's state, the batch
// applied to it, swapped in) and applied in place must be indistinguishable but for how long
// readers wait.

std::vector<WinnerRecord> square_family(std::int64_t side, double median_us,
                                        const std::string& dtype = "bf16") {
  std::vector<WinnerRecord> out;
  for (std::int64_t m = 1; m <= side; ++m)
    for (std::int64_t n = 1; n <= side; ++n)
      out.push_back(testing::winner(testing::gemm_problem(64 * m, 64 * n, 4096, dtype), median_us));
  return out;
}

// What a batch must leave: the index answers as one loaded with the same records would.
void expect_same_answers(const WinnerIndex& index, const WinnerIndex& loaded,
                         const std::vector<Problem>& queries) {
  ASSERT_EQ(index.size(), loaded.size());
  for (const auto& q : queries) {
    const auto a = index.exact(k_device, q);
    const auto b = loaded.exact(k_device, q);
    ASSERT_EQ(a == nullptr, b == nullptr) << q.key();
    if (a) {
      EXPECT_EQ(*a, *b) << q.key();
    }
    const auto near_a = index.nearest(k_device, q, 2.0, 8);
    const auto near_b = loaded.nearest(k_device, q, 2.0, 8);
    ASSERT_EQ(near_a.size(), near_b.size()) << q.key();
    for (size_t i = 0; i < near_a.size(); ++i) {
      EXPECT_EQ(*near_a[i].record, *near_b[i].record) << q.key() << " neighbour " << i;
      EXPECT_EQ(near_a[i].distance, near_b[i].distance);
      EXPECT_EQ(near_a[i].config, near_b[i].config);
    }
  }
}

// A batch over the threshold replaces some records, adds others (growing a family and making a
// new one) and leaves the rest: the copy it was built on kept every untouched entry, and the
// replaced records are found through the copy's trees, not the old ones.
TEST(BatchTest, ABatchBuiltAsideAnswersAsALoadOfTheSameRecords) {
  for (const size_t batch_size : {WinnerIndex::k_in_place_batch, WinnerIndex::k_in_place_batch + 1,
                                  WinnerIndex::k_change_log + 1}) {
    SCOPED_TRACE(batch_size);
    std::vector<WinnerRecord> before = square_family(40, 10);  // 1,600 records
    WinnerIndex index;
    index.load(before);
    std::vector<WinnerRecord> batch;
    for (size_t i = 0; batch.size() < batch_size; ++i) {
      WinnerRecord r =
          i % 3 == 0 ? before[i % before.size()]  // replaced
                     : testing::winner(testing::gemm_problem(64 * std::int64_t(i + 41), 64, 4096,
                                                             i % 3 == 1 ? "bf16" : "fp16"),
                                       10);  // a new shape of the family, or a new family
      r.ranked[0].median_us = 5;
      r.ranked[0].params["STAGES"] = 3;  // another best config: the neighbours' hash moves
      batch.push_back(r);
    }
    std::map<std::string, WinnerRecord> after;
    for (const auto& r : before) after.insert_or_assign(r.key(), r);
    for (const auto& r : batch) after.insert_or_assign(r.key(), r);
    std::vector<WinnerRecord> expected;
    std::vector<Problem> queries;
    for (const auto& [_, r] : after) {
      expected.push_back(r);
      queries.push_back(r.problem);
    }
    queries.push_back(testing::gemm_problem(100, 100, 4096));  // no exact record
    index.upsert(batch);
    WinnerIndex loaded;
    loaded.load(expected);
    expect_same_answers(index, loaded, queries);
    EXPECT_EQ(index.all().size(), after.size());
  }
}

// Readers running through a batch built aside see every key all along, each with its old or its
// new record, and never the new one before the old again: the swap is whole.
TEST(BatchTest, ReadersSeeTheOldStateOrTheNewNeverAPartOrAMissingKey) {
  const std::vector<WinnerRecord> old_records = square_family(60, 10);  // 3,600 records
  std::vector<WinnerRecord> new_records = old_records;
  for (auto& r : new_records) r.ranked[0].median_us = 20;
  ASSERT_GT(new_records.size(), WinnerIndex::k_in_place_batch);
  WinnerIndex index;
  index.load(old_records);
  constexpr int k_readers = 2;
  std::latch read_old(k_readers + 1);  // each reader has read every key once, before the batch
  std::atomic<bool> done{false};
  std::atomic<int> wrong{0};
  std::vector<std::thread> readers;
  for (int t = 0; t < k_readers; ++t)
    readers.emplace_back([&, t] {
      bool seen_new = false;
      // One pass before the batch, passes while it runs, then one whole pass after it returned
      // (which must see only new records).
      for (int pass = 0, last = 0; !last; ++pass) {
        last = done.load(std::memory_order_acquire);
        for (size_t i = size_t(t); i < old_records.size(); i += 7) {
          const auto r = index.exact(k_device, old_records[i].problem);
          const double us = r ? r->ranked[0].median_us : -1;
          const bool is_new = us == 20;
          if ((us != 10 && !is_new) || (seen_new && !is_new) || (last && !is_new)) ++wrong;
          seen_new = seen_new || is_new;
        }
        if (pass == 0) read_old.count_down();
      }
    });
  read_old.arrive_and_wait();
  index.upsert(new_records);
  done.store(true, std::memory_order_release);
  for (auto& r : readers) r.join();
  EXPECT_EQ(wrong, 0) << "reads that found no record, another record, or the old after the new";
}

// One generation step per batch, in place or built aside; a batch up to the log's length of known
// device classes is logged (answers elsewhere stay valid), a longer one clears the log.
TEST(BatchTest, OneGenerationPerBatchAndTheLogAsBefore) {
  const Problem far = testing::gemm_problem(64, 64, 64, "fp16");  // another family
  for (const size_t batch_size :
       {size_t{1}, WinnerIndex::k_in_place_batch, WinnerIndex::k_in_place_batch + 1,
        WinnerIndex::k_change_log, WinnerIndex::k_change_log + 1}) {
    SCOPED_TRACE(batch_size);
    WinnerIndex index;
    index.load({testing::winner(far, 1)});
    const auto g0 = index.generation();
    const auto described0 = index.described_since();
    const auto ids0 = index.device_ids_version();
    std::vector<WinnerRecord> batch = square_family(80, 10);  // 6,400 records
    batch.resize(batch_size);
    index.upsert(std::move(batch));
    EXPECT_EQ(index.generation(), g0 + 1);
    EXPECT_EQ(index.device_ids_version(), ids0) << "no new device class";
    EXPECT_EQ(index.size(), batch_size + 1);
    if (batch_size <= WinnerIndex::k_change_log) {
      EXPECT_EQ(index.described_since(), described0) << "logged, not cleared";
      EXPECT_EQ(index.untouched_since(k_device, far, g0, 2.0), g0 + 1) << "the far answer stays";
      EXPECT_EQ(index.untouched_since(k_device, testing::gemm_problem(64, 64, 4096), g0, 0.0),
                std::nullopt)
          << "a key of the batch";
    } else {
      EXPECT_EQ(index.described_since(), g0 + 1) << "cleared";
      EXPECT_EQ(index.untouched_since(k_device, far, g0, 2.0), std::nullopt);
    }
    // A batch bringing a device class new to the index: not described, and the ids move.
    std::vector<WinnerRecord> other = square_family(20, 10);  // 400 records
    other.resize(batch_size < other.size() ? batch_size : other.size());
    for (auto& r : other) r.device = DeviceClass{"NVIDIA A100-SXM4-80GB", 80, 108, 80};
    const auto g1 = index.generation();
    index.upsert(std::move(other));
    EXPECT_EQ(index.generation(), g1 + 1);
    EXPECT_EQ(index.described_since(), g1 + 1);
    EXPECT_NE(index.device_ids_version(), ids0);
    EXPECT_EQ(index.device_ids().size(), 2u);
  }
}

// The state a batch replaced is freed when the batch returns, with the records it replaced: an
// import does not leave the index's memory doubled.
TEST(BatchTest, TheReplacedStateAndRecordsAreFreed) {
  for (const size_t batch_size : {size_t{1}, WinnerIndex::k_in_place_batch + 1}) {
    SCOPED_TRACE(batch_size);
    std::vector<WinnerRecord> records = square_family(40, 10);
    records.resize(batch_size);
    WinnerIndex index;
    index.load(records);
    std::weak_ptr<const WinnerRecord> old = index.exact(k_device, records[0].problem);
    ASSERT_FALSE(old.expired());
    for (auto& r : records) r.ranked[0].median_us = 20;
    index.upsert(std::move(records));
    EXPECT_TRUE(old.expired()) << "the replaced record is still held";
  }
}

// Writers from several threads (imports, commits, a template swap) are serialized by the index
// itself: no batch built aside is lost to another built beside it, and each moves the generation
// once.
TEST(BatchTest, ConcurrentWritersLoseNoBatch) {
  constexpr int k_writers = 3;
  constexpr int k_batches = 4;
  WinnerIndex index;
  index.load({});
  const auto g0 = index.generation();
  std::latch started(k_writers + 1);
  std::vector<std::thread> writers;
  for (int w = 0; w < k_writers; ++w)
    writers.emplace_back([&, w] {
      started.arrive_and_wait();
      for (int b = 0; b < k_batches; ++b) {
        std::vector<WinnerRecord> batch;
        for (size_t i = 0; i <= WinnerIndex::k_in_place_batch; ++i)
          batch.push_back(
              testing::winner(testing::gemm_problem(w + 1, b + 1, std::int64_t(i + 1)), 10));
        index.upsert(std::move(batch));
        index.upsert(testing::winner(testing::gemm_problem(w + 1, b + 1, 100'000), 10));
      }
    });
  std::thread invalidator([&] {
    started.arrive_and_wait();
    for (int i = 0; i < k_batches; ++i) index.invalidate_answers();
  });
  for (auto& w : writers) w.join();
  invalidator.join();
  EXPECT_EQ(index.size(), size_t(k_writers * k_batches) * (WinnerIndex::k_in_place_batch + 2));
  EXPECT_EQ(index.generation(), g0 + k_writers * k_batches * 2 + k_batches);
}

}  // namespace
}  // namespace ktune
