// The GPU core's stream-ordered lifetime (backends/gpu/src/lifetime.*): a
// release runs once every event it waits for has completed, never before,
// exactly once, without a wait where it is asked for; a use list keeps one
// event per stream. Events here complete when the test says so (the real
// ones, on a device, are in test_gpu_execution); the stress test runs under
// ThreadSanitizer in CI.
#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

#include "lifetime.hpp"

namespace unicache::gpu::detail {
namespace {

// An event that completes when complete() is called.
class manual_event final : public event {
 public:
  state query() const override { return done_.load(std::memory_order_acquire) ? state::complete : state::pending; }
  void synchronize() const override {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return done_.load(std::memory_order_acquire); });
  }
  void complete() {
    {
      std::lock_guard lock(mu_);
      done_.store(true, std::memory_order_release);
    }
    cv_.notify_all();
  }

 private:
  std::atomic<bool> done_{false};
  mutable std::mutex mu_;
  mutable std::condition_variable cv_;
};

TEST(DeferredRelease, AReleaseWhoseWorkIsDoneRunsAtOnce) {
  auto e = std::make_shared<manual_event>();
  e->complete();
  bool released = false;
  std::atomic<std::uint64_t> deferred{0};
  deferred_release::instance().release_after({e}, [&] { released = true; }, &deferred);
  EXPECT_TRUE(released);
  EXPECT_EQ(deferred.load(), 0u);
}

TEST(DeferredRelease, AReleaseWaitsForEveryEventAndRunsOnceAtTheNextCollect) {
  auto a = std::make_shared<manual_event>(), b = std::make_shared<manual_event>();
  int released = 0;
  std::atomic<std::uint64_t> deferred{0};
  deferred_release& later = deferred_release::instance();
  later.release_after({a, b}, [&] { ++released; }, &deferred);
  EXPECT_EQ(deferred.load(), 1u);
  later.collect();
  EXPECT_EQ(released, 0);
  a->complete();
  later.collect();
  EXPECT_EQ(released, 0) << "one of its two events is still pending";
  b->complete();
  later.collect();
  later.collect();
  EXPECT_EQ(released, 1);
}

TEST(DeferredRelease, DrainWaitsForTheOldestUntilFewEnoughArePending) {
  deferred_release& later = deferred_release::instance();
  later.drain(0);
  std::vector<std::shared_ptr<manual_event>> events(4);
  std::vector<int> released(4, 0);
  for (int i = 0; i < 4; ++i) {
    events[i] = std::make_shared<manual_event>();
    later.release_after({events[i]}, [&released, i] { ++released[i]; }, nullptr);
  }
  // The device finishes the two oldest while drain() may be waiting; the
  // two newest stay pending, so drain(2) has only the oldest to wait for
  // (collect() would run any finished one first, whatever its age).
  std::thread device([&] {
    events[0]->complete();
    events[1]->complete();
  });
  later.drain(2);
  EXPECT_EQ(released, (std::vector<int>{1, 1, 0, 0})) << "the two oldest, waited for; the pending two kept";
  EXPECT_EQ(later.pending(), 2u);
  device.join();
  events[2]->complete();
  events[3]->complete();
  later.drain(0);
  EXPECT_EQ(released, std::vector<int>(4, 1));
}

TEST(UseList, KeepsTheLatestEventOfEachStreamAndDropsFinishedStreams) {
  use_list uses;
  auto first = std::make_shared<manual_event>(), second = std::make_shared<manual_event>();
  auto other = std::make_shared<manual_event>(), later = std::make_shared<manual_event>();
  uses.note(1, first);
  uses.note(1, second);  // stream 1 runs in order: the first is behind the second
  uses.note(2, other);
  other->complete();
  uses.note(3, later);  // a new stream: stream 2's finished entry goes
  const event_list kept = uses.take();
  ASSERT_EQ(kept.size(), 2u);
  EXPECT_EQ(kept[0], second);
  EXPECT_EQ(kept[1], later);
  EXPECT_TRUE(uses.take().empty());
}

// Threads use objects on their streams and let them go while a "device"
// thread completes events in order and collectors run: every release runs
// exactly once, and only after the events it waited for.
TEST(DeferredRelease, UnderConcurrentUseEveryReleaseRunsOnceAfterItsWork) {
  constexpr int kThreads = 4, kObjects = 2000;
  struct object {
    use_list uses;
    std::vector<std::shared_ptr<manual_event>> noted;
    std::atomic<int> released{0};
    std::atomic<bool> early{false};
  };
  std::vector<std::unique_ptr<object>> objects(kThreads * kObjects);
  for (auto& o : objects) o = std::make_unique<object>();
  std::mutex device_mu;
  std::vector<std::shared_ptr<manual_event>> queued;  // guarded by device_mu
  std::atomic<bool> stop{false};
  std::thread device([&] {
    while (!stop.load()) {
      std::vector<std::shared_ptr<manual_event>> now;
      {
        std::lock_guard lock(device_mu);
        now.swap(queued);
      }
      for (auto& e : now) e->complete();
      deferred_release::instance().collect();
      std::this_thread::yield();
    }
  });
  std::vector<std::thread> users;
  for (int t = 0; t < kThreads; ++t) {
    users.emplace_back([&, t] {
      std::mt19937 rng(t);
      for (int i = 0; i < kObjects; ++i) {
        object& o = *objects[t * kObjects + i];
        for (int use = 0; use < 3; ++use) {
          auto e = std::make_shared<manual_event>();
          o.noted.push_back(e);
          o.uses.note(static_cast<std::uint64_t>(t * 8 + rng() % 3), e);
          std::lock_guard lock(device_mu);
          queued.push_back(e);
        }
        auto check = [&o] {
          for (const auto& e : o.noted) {
            if (e->query() != event::state::complete) o.early.store(true);
          }
          o.released.fetch_add(1);
        };
        deferred_release::instance().release_after(o.uses.take(), check, nullptr);
        if (rng() % 4 == 0) deferred_release::instance().collect();
      }
    });
  }
  for (auto& u : users) u.join();
  stop.store(true);
  device.join();
  {
    std::lock_guard lock(device_mu);
    for (auto& e : queued) e->complete();
  }
  deferred_release::instance().drain(0);
  for (const auto& o : objects) {
    EXPECT_EQ(o->released.load(), 1);
    EXPECT_FALSE(o->early.load());
  }
}

}  // namespace
}  // namespace unicache::gpu::detail
