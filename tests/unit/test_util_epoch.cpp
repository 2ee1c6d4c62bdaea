#include "util/epoch.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <latch>
#include <thread>
#include <vector>

namespace unicache::detail {
namespace {

struct tracked {
  std::atomic<bool>* freed;
  int payload = 42;
};

void free_tracked(void* p) {
  auto* t = static_cast<tracked*>(p);
  t->freed->store(true);
  delete t;
}

TEST(EpochDomain, RetiredObjectIsNotFreedWhileAReaderThatCouldSeeItIsInside) {
  auto& domain = epoch_domain::instance();
  std::atomic<bool> freed{false};
  auto* object = new tracked{&freed};
  std::latch reader_inside(1), retired(1);
  std::thread reader([&] {
    epoch_guard guard;
    reader_inside.count_down();
    retired.wait();
    EXPECT_EQ(object->payload, 42);  // still valid: the reader began before retirement
  });
  reader_inside.wait();
  domain.retire(object, &free_tracked);
  domain.reclaim();
  EXPECT_FALSE(freed.load()) << "freed while a reader that began before retirement was inside";
  retired.count_down();
  reader.join();
  domain.reclaim();
  EXPECT_TRUE(freed.load());
}

TEST(EpochDomain, ReaderThatBeganAfterRetirementDoesNotDelayReclamation) {
  auto& domain = epoch_domain::instance();
  std::atomic<bool> freed{false};
  domain.retire(new tracked{&freed}, &free_tracked);
  epoch_domain::instance().reclaim();  // advances the epoch past the retirement
  std::latch reader_inside(1), done(1);
  std::thread reader([&] {
    epoch_guard guard;
    reader_inside.count_down();
    done.wait();
  });
  reader_inside.wait();
  std::atomic<bool> freed_later{false};
  domain.retire(new tracked{&freed_later}, &free_tracked);
  domain.reclaim();
  EXPECT_TRUE(freed.load());
  EXPECT_FALSE(freed_later.load());
  done.count_down();
  reader.join();
  domain.synchronize();
  EXPECT_TRUE(freed_later.load());
}

TEST(EpochDomain, GuardsNest) {
  auto& domain = epoch_domain::instance();
  std::atomic<bool> freed{false};
  auto* object = new tracked{&freed};
  std::latch inside(1), release_outer(1);
  std::thread reader([&] {
    epoch_guard outer;
    { epoch_guard inner; }  // leaving the inner guard must not end the section
    inside.count_down();
    release_outer.wait();
  });
  inside.wait();
  domain.retire(object, &free_tracked);
  domain.reclaim();
  EXPECT_FALSE(freed.load());
  release_outer.count_down();
  reader.join();
  domain.synchronize();
  EXPECT_TRUE(freed.load());
}

TEST(EpochDomain, ThreadsThatEndedDoNotBlockReclamation) {
  // A thread that read and ended gives its record back with no epoch
  // announced; if it did not, the first retirement below would never be freed.
  for (int i = 0; i < 200; ++i) {
    std::thread([] { epoch_guard guard; }).join();
  }
  std::atomic<bool> freed{false};
  epoch_domain::instance().retire(new tracked{&freed}, &free_tracked);
  epoch_domain::instance().reclaim();
  EXPECT_TRUE(freed.load());
}

// Readers dereference a shared pointer that writers keep replacing and
// retiring. Under AddressSanitizer a premature free is a use-after-free
// report; under ThreadSanitizer, a race.
TEST(EpochDomain, ConcurrentReadersNeverSeeFreedObjects) {
  struct node {
    std::uint64_t value;
    std::uint64_t check;
  };
  std::atomic<node*> current{new node{0, ~0ull}};
  std::atomic<bool> stop{false};
  std::atomic<std::uint64_t> bad{0};
  std::vector<std::thread> readers;
  for (int t = 0; t < 4; ++t) {
    readers.emplace_back([&] {
      while (!stop.load(std::memory_order_relaxed)) {
        epoch_guard guard;
        const node* n = current.load(std::memory_order_acquire);
        if (n->check != ~n->value) bad.fetch_add(1);
      }
    });
  }
  for (std::uint64_t i = 1; i <= 20000; ++i) {
    node* old = current.exchange(new node{i, ~i}, std::memory_order_acq_rel);
    epoch_domain::instance().retire(old, [](void* p) {
      auto* n = static_cast<node*>(p);
      n->check = 0;  // poison: a reader that still sees it reports it
      delete n;
    });
    epoch_domain::instance().collect();
  }
  stop = true;
  for (auto& r : readers) r.join();
  epoch_domain::instance().synchronize();
  delete current.load();
  EXPECT_EQ(bad.load(), 0u);
}

}  // namespace
}  // namespace unicache::detail
