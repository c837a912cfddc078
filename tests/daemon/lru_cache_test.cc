// ByteLru: bounded in bytes, evicts least recently used one entry at a time, allocates nothing on
// a hit. This binary counts heap allocations with a replacement operator new.
#include "daemon/lru_cache.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <map>
#include <memory>
#include <new>
#include <random>
#include <string>

namespace {
std::atomic<long long> g_allocations{0};
}  // namespace

void* operator new(std::size_t size) {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(size ? size : 1)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept {
  std::free(p);
}
void operator delete(void* p, std::size_t) noexcept {
  std::free(p);
}

namespace ktune {
namespace {

using Lru = ByteLru<int>;
constexpr std::size_t k_over = Lru::k_entry_overhead;

TEST(ByteLruTest, ChargesKeyValueAndOverhead) {
  Lru lru(10'000);
  EXPECT_TRUE(lru.put("abc", 1, 100));
  EXPECT_EQ(lru.stats().bytes, 3 + 100 + k_over);
  EXPECT_TRUE(lru.put("abc", 2, 10));  // replaced: charged once, at the new size
  EXPECT_EQ(lru.stats().bytes, 3 + 10 + k_over);
  EXPECT_EQ(lru.stats().entries, 1u);
  ASSERT_NE(lru.find("abc"), nullptr);
  EXPECT_EQ(*lru.find("abc"), 2);
}

TEST(ByteLruTest, EvictsLeastRecentlyUsedOneAtATimeNeverEverything) {
  const std::size_t each = 2 + 100 + k_over;  // keys "k0".."k9"
  Lru lru(5 * each);
  for (int i = 0; i < 5; ++i) lru.put("k" + std::to_string(i), i, 100);
  EXPECT_EQ(lru.stats().entries, 5u);
  EXPECT_EQ(lru.stats().bytes, 5 * each);
  ASSERT_NE(lru.find("k0"), nullptr);  // k0 is now the most recent; k1 the coldest
  lru.put("k5", 5, 100);
  const auto s = lru.stats();
  EXPECT_EQ(s.entries, 5u);
  EXPECT_EQ(s.evictions, 1u);
  EXPECT_LE(s.bytes, s.max_bytes);
  EXPECT_EQ(lru.find("k1"), nullptr);
  for (const char* k : {"k0", "k2", "k3", "k4", "k5"}) EXPECT_NE(lru.find(k), nullptr) << k;
}

// A hit in the most recent quarter leaves the order as it is (no list writes); a hit further
// back moves the entry to the front. Either way a hit entry outlives three quarters of the
// cache's entries added after it; the one left in place is evicted before the one moved.
TEST(ByteLruTest, AHitInTheRecentQuarterStaysWhereItIsAndOutlivesThreeQuarters) {
  auto key = [](int i) { return "k" + std::to_string(1000 + i); };  // all of one length
  const std::size_t each = 5 + 10 + k_over;
  // 100 entries, key(0) the coldest; then a hit on key(90) (9 entries ahead of it: stays) and
  // on key(10) (89 ahead: moved to the front); then `added` more entries.
  auto cache_after = [&](int added) {
    auto lru = std::make_unique<Lru>(100 * each);
    for (int i = 0; i < 100 + added; ++i) {
      if (i == 100) {
        EXPECT_NE(lru->find(key(90)), nullptr);
        EXPECT_NE(lru->find(key(10)), nullptr);
      }
      lru->put(key(i), i, 10);
    }
    EXPECT_EQ(lru->stats().evictions, std::uint64_t(added));
    return lru;
  };
  // 75 added: key(0..9) and key(11..75) evicted; key(90) survived.
  auto a = cache_after(75);
  EXPECT_EQ(a->find(key(75)), nullptr);
  EXPECT_NE(a->find(key(76)), nullptr);
  EXPECT_NE(a->find(key(90)), nullptr);
  EXPECT_NE(a->find(key(10)), nullptr);
  // 91 added: the 89 behind key(90), then key(90) itself and key(91); key(10) lives on.
  auto b = cache_after(91);
  EXPECT_EQ(b->find(key(89)), nullptr);
  EXPECT_EQ(b->find(key(90)), nullptr);
  EXPECT_EQ(b->find(key(91)), nullptr);
  EXPECT_NE(b->find(key(92)), nullptr);
  EXPECT_NE(b->find(key(10)), nullptr);
}

TEST(ByteLruTest, ABigEntryEvictsAsManyAsItNeeds) {
  Lru lru(10'000);
  for (int i = 0; i < 20; ++i) lru.put("k" + std::to_string(i), i, 200);
  const auto before = lru.stats();
  ASSERT_LE(before.bytes, 10'000u);
  lru.put("big", 0, 6'000);
  const auto after = lru.stats();
  EXPECT_LE(after.bytes, 10'000u);
  EXPECT_NE(lru.find("big"), nullptr);
  EXPECT_GT(after.evictions, before.evictions + 5);
  EXPECT_GT(after.entries, 1u);  // the most recent small ones stay
}

TEST(ByteLruTest, AnEntryOverTheBoundAloneIsNotStoredAndDropsTheOldOne) {
  Lru lru(1'000);
  lru.put("k", 1, 10);
  EXPECT_FALSE(lru.put("k", 2, 5'000));
  EXPECT_EQ(lru.find("k"), nullptr);
  const auto s = lru.stats();
  EXPECT_EQ(s.refused, 1u);
  EXPECT_EQ(s.entries, 0u);
  EXPECT_EQ(s.bytes, 0u);
}

TEST(ByteLruTest, InvalidEntriesAreDroppedAndCountedAsMisses) {
  Lru lru(10'000);
  lru.put("old", 1, 10);
  lru.put("new", 2, 10);
  auto current = [](int v) { return v == 2; };
  EXPECT_EQ(lru.find("old", current), nullptr);
  EXPECT_NE(lru.find("new", current), nullptr);
  const auto s = lru.stats();
  EXPECT_EQ(s.entries, 1u);
  EXPECT_EQ(s.hits, 1u);
  EXPECT_EQ(s.misses, 1u);
  EXPECT_EQ(s.bytes, 3 + 10 + k_over);
}

// LookupService frees what its caches evict after releasing its lock: put() with a graveyard
// hands the removed entries over alive, in eviction order, and the bound still holds.
TEST(ByteLruTest, PutHandsWhatItRemovesToTheGraveyardAlive) {
  ByteLru<std::shared_ptr<int>> lru(2 * (1 + 100 + k_over));
  auto a = std::make_shared<int>(1), b = std::make_shared<int>(2), c = std::make_shared<int>(3);
  const std::weak_ptr<int> watch_a = a, watch_b = b;
  EXPECT_TRUE(lru.put("a", std::move(a), 100));
  EXPECT_TRUE(lru.put("b", std::move(b), 100));
  ByteLru<std::shared_ptr<int>>::Graveyard dead;
  EXPECT_TRUE(lru.put("c", std::move(c), 100, &dead));              // evicts a
  EXPECT_TRUE(lru.put("b", std::make_shared<int>(4), 100, &dead));  // replaces b
  ASSERT_EQ(dead.size(), 2u);
  EXPECT_EQ(dead.front().key, "a");
  EXPECT_EQ(dead.back().key, "b");
  EXPECT_FALSE(watch_a.expired()) << "evicted, but not freed under the caller's lock";
  EXPECT_FALSE(watch_b.expired());
  EXPECT_EQ(lru.stats().entries, 2u);
  EXPECT_EQ(lru.stats().bytes, 2 * (1 + 100 + k_over));
  EXPECT_EQ(lru.find("a"), nullptr);
  dead.clear();
  EXPECT_TRUE(watch_a.expired());
  EXPECT_TRUE(watch_b.expired());
}

TEST(ByteLruTest, AHitAllocatesNothing) {
  Lru lru(1 << 20);
  const std::string long_key(200, 'x');  // past any small-string buffer
  for (int i = 0; i < 100; ++i) lru.put(long_key + std::to_string(i), i, 10);
  const std::string probe = long_key + "42";
  const std::string absent = long_key + "x";
  const long long before = g_allocations.load();
  for (int i = 0; i < 1000; ++i) ASSERT_NE(lru.find(probe), nullptr);
  EXPECT_EQ(lru.find(absent), nullptr);
  EXPECT_EQ(g_allocations.load() - before, 0);
  lru.put(absent, 1, 10);  // the counter counts: a put allocates its key and its list node
  EXPECT_GE(g_allocations.load() - before, 2);
}

// The index is open-addressed and closes the holes removals leave by moving later slots back:
// after heavy churn (evictions, replacements, invalidations, growth) every entry the list holds
// is found under its key with its latest value, and nothing else is.
TEST(ByteLruTest, EveryEntryStaysReachableThroughChurn) {
  Lru lru(300 * (8 + 10 + k_over));
  std::map<std::string, int> latest;
  std::mt19937 rng(7);
  for (int i = 0; i < 20'000; ++i) {
    const std::string key = "key-" + std::to_string(10'000 + rng() % 2'000);  // all of one length
    const int value = i;
    if (i % 7 == 0) {
      lru.find(key, [](int v) { return v % 2 == 0; });  // drops odd values
    } else {
      lru.put(key, value, 10);
      latest[key] = value;
    }
  }
  size_t found = 0;
  for (const auto& [key, value] : latest) {
    if (const int* v = lru.find(key)) {
      ++found;
      EXPECT_EQ(*v, value) << key;
    }
  }
  EXPECT_EQ(found, lru.stats().entries);
  EXPECT_GT(found, 250u);
  EXPECT_EQ(lru.find("key-absent"), nullptr);
}

TEST(ByteLruTest, StaysWithinTheBoundUnderChurn) {
  Lru lru(50'000);
  for (int i = 0; i < 20'000; ++i) {
    lru.put("key-" + std::to_string(i), i, std::size_t(i % 700));
    ASSERT_LE(lru.stats().bytes, 50'000u);
    if (i % 3 == 0) lru.find("key-" + std::to_string(i / 2));
  }
  const auto s = lru.stats();
  EXPECT_GT(s.evictions, 19'000u);
  EXPECT_GT(s.entries, 40u);
}

}  // namespace
}  // namespace ktune
