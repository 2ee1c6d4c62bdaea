#include "cache/entry_table.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "util/epoch.hpp"

namespace unicache::detail {
namespace {

entry* make(std::uint64_t hash, std::string_view key, std::uint64_t context = 0,
            owner_id backend = 1) {
  std::promise<cache_value> p;
  return entry::create(hash, context, backend, key, 1, 0, p.get_future().share());
}

struct table_fixture : ::testing::Test {
  ~table_fixture() override {
    for (entry* e : owned) entry_ref::adopt(e).reset();
  }
  entry* add(std::uint64_t hash, std::string_view key, std::uint64_t context = 0,
             owner_id backend = 1) {
    entry* e = make(hash, key, context, backend);
    owned.push_back(e);
    table.insert(e);
    return e;
  }
  entry_table table;
  std::vector<entry*> owned;
};

TEST_F(table_fixture, SameHashDifferentKeysAreDistinctEntries) {
  entry* a = add(7, "alpha");
  entry* b = add(7, "beta");
  EXPECT_EQ(table.find(7, 0, 1, "alpha"), a);
  EXPECT_EQ(table.find(7, 0, 1, "beta"), b);
  EXPECT_EQ(table.find(7, 0, 1, "gamma"), nullptr) << "a hash match alone must never be a hit";
}

TEST_F(table_fixture, ContextAndBackendArePartOfTheKey) {
  entry* a = add(7, "k", /*context=*/1, /*backend=*/1);
  EXPECT_EQ(table.find(7, 1, 1, "k"), a);
  EXPECT_EQ(table.find(7, 2, 1, "k"), nullptr);
  EXPECT_EQ(table.find(7, 1, 2, "k"), nullptr);
}

TEST_F(table_fixture, ErasedEntryIsGoneAndItsProbeChainStillWorks) {
  entry* a = add(3, "a");
  entry* b = add(3, "b");  // same start slot: b lies after a
  entry* c = add(3, "c");
  table.erase(b);
  EXPECT_EQ(table.find(3, 0, 1, "b"), nullptr);
  EXPECT_EQ(table.find(3, 0, 1, "a"), a);
  EXPECT_EQ(table.find(3, 0, 1, "c"), c) << "a tombstone must not end the probe";
  EXPECT_EQ(table.size(), 2u);
}

TEST_F(table_fixture, GrowthKeepsEveryEntry) {
  for (int i = 0; i < 5000; ++i) add(static_cast<std::uint64_t>(i) * 2654435761u, std::to_string(i));
  for (int i = 0; i < 5000; i += 2) table.erase(owned[i]);
  for (int i = 0; i < 5000; ++i) {
    entry* found = table.find(static_cast<std::uint64_t>(i) * 2654435761u, 0, 1, std::to_string(i));
    if (i % 2 == 0) {
      EXPECT_EQ(found, nullptr) << i;
    } else {
      EXPECT_EQ(found, owned[i]) << i;
    }
  }
  EXPECT_EQ(table.size(), 2500u);
  epoch_domain::instance().synchronize();
}

TEST_F(table_fixture, ReadersRunConcurrentlyWithInsertsErasesAndGrowth) {
  constexpr int kStable = 64;
  for (int i = 0; i < kStable; ++i) add(static_cast<std::uint64_t>(i), "stable" + std::to_string(i));
  std::atomic<bool> stop{false};
  std::atomic<int> lost{0};
  std::vector<std::thread> readers;
  for (int t = 0; t < 3; ++t) {
    readers.emplace_back([&] {
      while (!stop.load(std::memory_order_relaxed)) {
        for (int i = 0; i < kStable; ++i) {
          epoch_guard guard;
          if (!table.find(static_cast<std::uint64_t>(i), 0, 1, "stable" + std::to_string(i))) {
            lost.fetch_add(1);
          }
        }
      }
    });
  }
  // The writer churns other keys, forcing rebuilds and tombstones.
  std::vector<entry*> churn;
  for (int round = 0; round < 200; ++round) {
    for (int i = 0; i < 50; ++i) {
      entry* e = make(static_cast<std::uint64_t>(1000 + round * 50 + i), "churn");
      table.insert(e);
      churn.push_back(e);
    }
    for (entry* e : churn) {
      table.erase(e);
      epoch_domain::instance().retire(e, [](void* p) { entry_ref::adopt(static_cast<entry*>(p)).reset(); });
    }
    churn.clear();
    epoch_domain::instance().collect();
  }
  stop = true;
  for (auto& r : readers) r.join();
  epoch_domain::instance().synchronize();
  EXPECT_EQ(lost.load(), 0) << "a reader missed an entry that was present throughout";
}

}  // namespace
}  // namespace unicache::detail
