// The kernel store's chain, local then remote, against a real redis-server:
// a machine with an empty local store gets what another one stored, and
// keeps it locally; a remote that is down or misconfigured never fails a
// get or a put; the secret file is read with care.
#include <gtest/gtest.h>

#include <sys/stat.h>

#include <chrono>
#include <fstream>
#include <string>
#include <thread>

#include "redis_test.hpp"
#include "store_test_support.hpp"
#include "unicache/store.hpp"

namespace unicache {
namespace {


byte_vector binary(std::size_t n, unsigned char seed) {
  byte_vector b(n);
  for (std::size_t i = 0; i < n; ++i) b[i] = static_cast<unsigned char>(seed + i * 7);
  return b;
}

using RemoteStore = testing::redis_test;

TEST_F(RemoteStore, AnEmptyLocalStoreGetsAnotherMachinesBinaryAndKeepsIt) {
  testing::temp_dir dir_a, dir_b;
  const device_identity device = testing::gpu_a();
  const byte_vector b = binary(64 << 10, 1);
  {
    kernel_store a(testing::store_in(dir_a.path()));
    a.set_remote(server_.url());
    ASSERT_TRUE(a.put(device, "opencl-c gemm", b));
    a.flush_remote();
    EXPECT_EQ(a.remote_tier_stats().puts, 1u);
  }
  kernel_store machine_b(testing::store_in(dir_b.path()));
  machine_b.set_remote(server_.url());
  EXPECT_EQ(machine_b.get(device, "opencl-c gemm"), b);
  const remote_stats st = machine_b.remote_tier_stats();
  EXPECT_TRUE(st.enabled);
  EXPECT_EQ(st.hits, 1u);
  EXPECT_GT(st.bytes_read, b.size());
  machine_b.set_remote("");
  EXPECT_EQ(machine_b.get(device, "opencl-c gemm"), b) << "the remote hit was written to the local store";
  EXPECT_FALSE(machine_b.remote_tier_stats().enabled);
}

TEST_F(RemoteStore, ARemoteThatIsDownNeverFailsAGetOrAPut) {
  testing::temp_dir dir;
  kernel_store store(testing::store_in(dir.path()));
  store.set_remote(server_.url("connect_timeout_ms=100&timeout_ms=200"));
  server_.kill();
  const device_identity device = testing::gpu_a();
  ::testing::internal::CaptureStderr();
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(store.get(device, "k" + std::to_string(i)), std::nullopt);
    EXPECT_TRUE(store.put(device, "k" + std::to_string(i), binary(100, 2))) << "the local store still works";
  }
  store.flush_remote();
  ::testing::internal::GetCapturedStderr();
  const remote_stats st = store.remote_tier_stats();
  EXPECT_EQ(st.errors + st.timeouts, 1u) << "one failure, then the breaker";
  EXPECT_EQ(st.skipped, 4u);
  EXPECT_EQ(store.get(device, "k3"), binary(100, 2));
}

TEST_F(RemoteStore, ALeaseGoesWithAPutOrAFailedBuildsReleaseAndTheNextAskerBuilds) {
  testing::temp_dir a_dir, b_dir, c_dir;
  kernel_store a(testing::store_in(a_dir.path())), b(testing::store_in(b_dir.path())), c(testing::store_in(c_dir.path()));
  for (kernel_store* s : {&a, &b, &c}) s->set_remote(server_.url());
  const device_identity device = testing::gpu_a();
  const kernel_store::lookup first = a.get_or_lease(device, "cuda k");
  ASSERT_FALSE(first.binary);
  ASSERT_TRUE(first.leased) << "the first to miss builds";
  // a's build fails: it hands the lease on, and b (waiting) gets it.
  kernel_store::lookup second;
  std::thread waiter([&] { second = b.get_or_lease(device, "cuda k"); });
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (b.remote_tier_stats().lease_waits == 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  a.release_lease(device, "cuda k");
  a.flush_remote();
  waiter.join();
  EXPECT_FALSE(second.binary);
  ASSERT_TRUE(second.leased) << "b builds next";
  // b's build succeeds: its put stores the binary and ends the lease; c
  // finds the binary without waiting.
  EXPECT_TRUE(b.put(device, "cuda k", testing::binary_for("k", 900)));
  b.flush_remote();
  const kernel_store::lookup third = c.get_or_lease(device, "cuda k");
  EXPECT_EQ(third.binary, testing::binary_for("k", 900));
  EXPECT_FALSE(third.leased);
  EXPECT_EQ(c.remote_tier_stats().lease_waits, 0u);
  EXPECT_EQ(a.remote_tier_stats().leases + b.remote_tier_stats().leases, 2u);
}

TEST_F(RemoteStore, BadSettingsAreRefusedWithoutQuotingSecrets) {
  testing::temp_dir dir;
  kernel_store store(testing::store_in(dir.path()));
  try {
    store.set_remote("redis://u:hunter2@h:99999");
    FAIL() << "a bad port was accepted";
  } catch (const unicache::invalid_argument& e) {
    EXPECT_EQ(std::string(e.what()).find("hunter2"), std::string::npos) << e.what();
  }
  const std::string secret_path = dir.path() + "/secret";
  {
    std::ofstream(secret_path) << "short\n";
  }
  EXPECT_THROW(store.set_remote(server_.url(), secret_path), unicache::invalid_argument) << "under 16 bytes";
  {
    std::ofstream(secret_path) << "a secret that is long enough\n";
  }
  ::chmod(secret_path.c_str(), 0666);
  EXPECT_THROW(store.set_remote(server_.url(), secret_path), unicache::invalid_argument) << "writable by others";
  ::chmod(secret_path.c_str(), 0620);
  EXPECT_THROW(store.set_remote(server_.url(), secret_path), unicache::invalid_argument) << "writable by its group";
  ::chmod(secret_path.c_str(), 0600);
  EXPECT_NO_THROW(store.set_remote(server_.url(), secret_path));
  EXPECT_THROW(store.set_remote(server_.url(), dir.path()), unicache::invalid_argument) << "a directory";
  const std::string fifo = dir.path() + "/fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  EXPECT_THROW(store.set_remote(server_.url(), fifo), unicache::invalid_argument) << "a FIFO, without hanging";
  EXPECT_TRUE(store.remote_tier_stats().enabled) << "a refused setting changes nothing";
}

}  // namespace
}  // namespace unicache
