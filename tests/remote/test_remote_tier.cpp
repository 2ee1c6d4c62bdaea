// The remote tier against a real redis-server: a second process's hit,
// values that fail a check (corrupt, truncated, foreign, unsigned or wrongly
// signed) never served, read-only mode, and a server that dies or stalls
// (the breaker opens, nothing throws).
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "redis_test.hpp"
#include "store_test_support.hpp"

namespace unicache {
namespace {

using testing::redis_tier;
using redis::redis_connection;
using redis::redis_status;

const device_identity kDevice{"Portable Computing Language", "cpu-x86-64", "OpenCL 3.0 PoCL", "3.1"};
const device_identity kOtherDevice{"NVIDIA CUDA", "NVIDIA H200", "OpenCL 3.0 CUDA", "560.35.03"};

byte_vector binary(std::size_t n, unsigned char seed) {
  byte_vector b(n);
  for (std::size_t i = 0; i < n; ++i) b[i] = static_cast<unsigned char>(seed + i * 31);
  return b;
}

// Whether `tier` is waiting for a lease (or waited for one) before `limit`.
bool waits_within(const redis_tier& tier, std::chrono::milliseconds limit) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (tier.counters().lease_waits.load() == 0) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

class RemoteTier : public testing::redis_test {
 protected:
  void plant(const std::string& key, const byte_vector& value) {
    redis_connection c(config());
    ASSERT_EQ(c.set(key, value).status, redis_status::ok);
  }

};

TEST_F(RemoteTier, AnotherProcessGetsWhatOneWrote) {
  const byte_vector b = binary(64 << 10, 3);
  {
    redis_tier writer(config(), "");
    writer.put(kDevice, "opencl-c gemm", b);
    writer.flush();
    EXPECT_EQ(writer.counters().puts.load(), 1u);
  }
  redis_tier reader(config(), "");
  EXPECT_EQ(reader.get(kDevice, "opencl-c gemm").binary, b);
  EXPECT_EQ(reader.get(kDevice, "opencl-c other").binary, std::nullopt);
  EXPECT_EQ(reader.get(kOtherDevice, "opencl-c gemm").status, tier_status::miss) << "another device's key";
  EXPECT_EQ(reader.counters().hits.load(), 1u);
  EXPECT_EQ(reader.counters().misses.load(), 2u);
}

TEST_F(RemoteTier, CorruptTruncatedAndForeignValuesAreRejectedNeverServed) {
  redis_tier tier(config(), "");
  const std::string key = "cuda gemm";
  const std::string where = tier.redis().entry_key(kDevice, key);
  const byte_vector good = tier.encode(kDevice, key, binary(4096, 9));
  byte_vector corrupt = good;
  corrupt[corrupt.size() / 2] ^= 0x40;
  const byte_vector truncated(good.begin(), good.begin() + static_cast<std::ptrdiff_t>(good.size() - 100));
  const byte_vector foreign_device = tier.encode(kOtherDevice, key, binary(4096, 9));
  const byte_vector other_key = tier.encode(kDevice, "cuda other", binary(4096, 9));
  const std::string junk = "not an entry at all";
  for (const byte_vector& bad : {corrupt, truncated, foreign_device, other_key, byte_vector(junk.begin(), junk.end())}) {
    plant(where, bad);
    EXPECT_EQ(tier.get(kDevice, key).binary, std::nullopt);
  }
  EXPECT_EQ(tier.counters().rejected.load(), 5u);
  EXPECT_EQ(tier.counters().hits.load(), 0u);
  plant(where, good);
  EXPECT_EQ(tier.get(kDevice, key).binary, binary(4096, 9));
}

TEST_F(RemoteTier, WithASecretUnsignedAndWronglySignedValuesAreRejected) {
  const std::string key = "cuda gemm";
  redis_tier signer(config(), "the fleet's secret, 32+ bytes long");
  redis_tier unsigned_tier(config(), "");
  redis_tier other_signer(config(), "another secret, also long enough");
  const std::string where = signer.redis().entry_key(kDevice, key);
  plant(where, unsigned_tier.encode(kDevice, key, binary(1000, 1)));
  EXPECT_EQ(signer.get(kDevice, key).binary, std::nullopt);
  plant(where, other_signer.encode(kDevice, key, binary(1000, 1)));
  EXPECT_EQ(signer.get(kDevice, key).binary, std::nullopt);
  EXPECT_EQ(signer.counters().rejected.load(), 2u);
  plant(where, signer.encode(kDevice, key, binary(1000, 1)));
  EXPECT_EQ(signer.get(kDevice, key).binary, binary(1000, 1));
  EXPECT_EQ(unsigned_tier.get(kDevice, key).binary, std::nullopt) << "a signed value is not an unsigned entry";
}

TEST_F(RemoteTier, ReadOnlyWritesNothing) {
  redis_tier tier(config("read_only=1"), "");
  tier.put(kDevice, "k", binary(100, 5));
  tier.remove(kDevice, "k");
  tier.flush();
  redis_connection c(config());
  EXPECT_EQ(c.command({"DBSIZE"}).value, byte_vector{'0'});
}

TEST_F(RemoteTier, AServerThatDiesOpensTheBreakerAndNothingThrows) {
  redis_tier tier(config("connect_timeout_ms=100&timeout_ms=200"), "");
  tier.put(kDevice, "k", binary(100, 5));
  tier.flush();
  ASSERT_EQ(tier.get(kDevice, "k").binary, binary(100, 5));
  server_.kill();
  ::testing::internal::CaptureStderr();
  const auto failed = tier.get(kDevice, "k").status;
  EXPECT_TRUE(failed == tier_status::error || failed == tier_status::timeout);
  EXPECT_EQ(tier.get(kDevice, "k").status, tier_status::skipped) << "the breaker is open";
  tier.put(kDevice, "k2", binary(100, 6));
  tier.flush();
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(tier.counters().errors.load() + tier.counters().timeouts.load(), 1u) << "one failure, then the breaker";
  EXPECT_GE(tier.counters().skipped.load(), 1u);
  EXPECT_GE(tier.counters().dropped.load(), 1u);
  const auto first = err.find("remote kernel cache:");
  ASSERT_NE(first, std::string::npos) << err;
  EXPECT_EQ(err.find("remote kernel cache:", first + 1), std::string::npos) << "one warning: " << err;
}

TEST_F(RemoteTier, AStalledServerIsATimeoutThenTheBreakerSkipsIt) {
  redis_tier tier(config("timeout_ms=150"), "");
  tier.put(kDevice, "k", binary(100, 5));
  tier.flush();
  redis_connection admin(config());
  ASSERT_EQ(admin.command({"CLIENT", "PAUSE", "1500", "ALL"}).status, redis_status::ok);
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(tier.get(kDevice, "k").status, tier_status::timeout);
  EXPECT_EQ(tier.get(kDevice, "k").status, tier_status::skipped);
  ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(tier.counters().timeouts.load(), 1u);
  EXPECT_EQ(tier.counters().skipped.load(), 1u);
}

TEST_F(RemoteTier, AfterTheBackOffOneProbeGoesOutAndTheOtherCallsAreSkipped) {
  redis_tier tier(config("timeout_ms=150&breaker_s=1"), "");
  tier.put(kDevice, "k", binary(100, 5));
  tier.flush();
  redis_connection admin(config());
  ASSERT_EQ(admin.command({"CLIENT", "PAUSE", "3000", "ALL"}).status, redis_status::ok);
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(tier.get(kDevice, "k").status, tier_status::timeout) << "the breaker opens for 1 s";
  std::this_thread::sleep_for(std::chrono::milliseconds(1300));  // its back-off is over; the server still stalls
  constexpr int kThreads = 8;
  std::atomic<int> timeouts{0}, skipped{0};
  std::atomic<int> ready{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      ready.fetch_add(1);
      while (ready.load() < kThreads) std::this_thread::yield();
      const auto s = tier.get(kDevice, "k").status;
      if (s == tier_status::timeout) timeouts.fetch_add(1);
      if (s == tier_status::skipped) skipped.fetch_add(1);
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(timeouts.load(), 1) << "one probe pays the timeout";
  EXPECT_EQ(skipped.load(), kThreads - 1) << "the others wait for its answer";
  EXPECT_EQ(tier.get(kDevice, "k").status, tier_status::skipped) << "the probe failed: open again, for 2 s";
  std::this_thread::sleep_for(std::chrono::milliseconds(2400));  // the pause and the back-off are over
  EXPECT_EQ(tier.get(kDevice, "k").binary, binary(100, 5)) << "a probe that succeeds closes the breaker";
  EXPECT_EQ(tier.get(kDevice, "k").binary, binary(100, 5));
  ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(tier.counters().timeouts.load(), 2u);
}

TEST_F(RemoteTier, ACounterReportWhoseAnswerWasLostIsCountedOnce) {
  redis_tier tier(config("timeout_ms=200&breaker_s=1"), "");
  tier.put(kDevice, "k", binary(100, 5));
  tier.flush();  // the write and its counts
  ASSERT_EQ(tier.get(kDevice, "k").binary, binary(100, 5));  // a hit, not reported yet
  ::testing::internal::CaptureStderr();
  server_.freeze();  // the report waits in the server's socket,
  tier.flush();      // the tier times out and never sees its answer,
  server_.thaw();    // and the server runs it
  std::this_thread::sleep_for(std::chrono::milliseconds(1300));  // the back-off is over
  tier.flush();      // the same report again (the server has it: applied once), then the timeout's count
  ::testing::internal::GetCapturedStderr();
  redis_connection admin(config());
  EXPECT_EQ(admin.command({"HGET", tier.redis().stats_key(), "hits"}).value, (byte_vector{'1'})) << "counted once, not twice";
  EXPECT_EQ(admin.command({"HGET", tier.redis().stats_key(), "puts"}).value, (byte_vector{'1'}));
  EXPECT_EQ(admin.command({"HGET", tier.redis().stats_key(), "timeouts"}).value, (byte_vector{'1'})) << "nothing lost";
  EXPECT_EQ(tier.counters().timeouts.load(), 1u);
}

TEST_F(RemoteTier, EachReportOfATierIsAppliedOnceWhateverIsSentAgain) {
  // Two tiers (two processes' worth) report into one hash; the client's own
  // retry and a resend after a lost answer carry the same number.
  redis_tier a(config(), ""), b(config(), "");
  a.put(kDevice, "ka", binary(10, 1));
  b.put(kDevice, "kb", binary(10, 2));
  a.flush();
  b.flush();
  redis_connection admin(config());
  EXPECT_EQ(admin.command({"HGET", a.redis().stats_key(), "puts"}).value, (byte_vector{'2'}));
  EXPECT_NE(a.redis().report_key(a.token()), b.redis().report_key(b.token()));
  EXPECT_EQ(admin.command({"GET", a.redis().report_key(a.token())}).value, (byte_vector{'1'})) << "a's first report";
}

TEST_F(RemoteTier, AnAclUserWithoutCounterRightsStillWritesAndReads) {
  redis_connection admin(config());
  ASSERT_EQ(admin.command({"ACL", "SETUSER", "ci", "on", ">ci-password-1", "~unicache:*", "+getrange", "+set", "+del"})
                .status,
            redis_status::ok);
  redis_config ci = config();
  ci.user = "ci";
  ci.password = "ci-password-1";
  redis_tier tier(ci, "");
  tier.put(kDevice, "k", binary(100, 5));
  tier.flush();  // the counter report is refused (no HINCRBY): no breaker
  tier.put(kDevice, "k2", binary(100, 6));
  tier.flush();
  EXPECT_EQ(tier.get(kDevice, "k2").binary, binary(100, 6));
  EXPECT_EQ(tier.counters().errors.load() + tier.counters().skipped.load() + tier.counters().dropped.load(), 0u);
}

TEST_F(RemoteTier, AValueOfAnotherTypeUnderAKeyIsRejectedNotAServerFailure) {
  redis_tier tier(config(), "");
  redis_connection c(config());
  ASSERT_EQ(c.command({"HSET", tier.redis().entry_key(kDevice, "k"), "f", "v"}).status, redis_status::ok);
  EXPECT_EQ(tier.get(kDevice, "k").status, tier_status::miss);
  EXPECT_EQ(tier.counters().rejected.load(), 1u);
  EXPECT_EQ(tier.get(kDevice, "other").status, tier_status::miss) << "the breaker stays closed";
  EXPECT_EQ(tier.counters().errors.load() + tier.counters().skipped.load(), 0u);
}

// A server that trickles its reply (a byte every 100 ms, forever) is bound
// by the command's timeout as a whole, not per read.
TEST(RemoteTierTrickle, ATricklingServerTimesOutAsAWhole) {
  const int listener = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  ASSERT_EQ(::bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  ASSERT_EQ(::listen(listener, 4), 0);
  ASSERT_EQ(::getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  std::atomic<bool> stop{false};
  std::thread server([&] {
    const int fd = ::accept(listener, nullptr, nullptr);
    char request[4096];
    (void)::read(fd, request, sizeof request);
    const char* reply = "$1000000\r\n";
    (void)::write(fd, reply, std::strlen(reply));
    for (int i = 0; i < 300 && !stop.load(); ++i) {  // 30 s at most
      (void)::send(fd, "x", 1, MSG_NOSIGNAL);
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    ::close(fd);
  });
  redis_config c = parse_redis_url("redis://127.0.0.1:" + std::to_string(ntohs(addr.sin_port)) + "?timeout_ms=400");
  redis_connection conn(c);
  const auto r = conn.get("k", 2 << 20);
  stop = true;
  server.join();
  ::close(listener);
  EXPECT_EQ(r.status, redis_status::timeout) << r.message;
}

TEST_F(RemoteTier, AChildOfForkLeavesItsParentsTierAlone) {
  redis_tier tier(config(), "");
  tier.put(kDevice, "k", binary(100, 5));
  tier.flush();
  ASSERT_EQ(tier.get(kDevice, "k").binary, binary(100, 5));  // a pooled connection the child inherits
  const testing::child_result child = testing::run_in_child(
      [&] {
        const bool skipped = tier.get(kDevice, "k").status == tier_status::skipped;
        const bool not_written = tier.put(kDevice, "k3", binary(10, 1)).status == tier_status::skipped;
        const bool flushed = tier.flush();  // no writer thread here: returns at once
        return skipped && not_written && flushed ? 0 : 1;
      },
      testing::kHangAlarmSeconds);
  EXPECT_EQ(child.status, 0) << child.err;
  EXPECT_EQ(tier.get(kDevice, "k").binary, binary(100, 5)) << "the parent's connections still work";
}

// Many threads on one tier: the connection pool, the write queue and the
// counters under concurrent gets, puts and removes (ThreadSanitizer runs it).
TEST_F(RemoteTier, ManyThreadsShareOneTierWithZeroCorruptReads) {
  redis_tier tier(config(), "a secret for this test, long enough");
  std::atomic<int> corrupt{0}, hits{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 150; ++i) {
        const int k = (t * 31 + i * 7) % 16;
        const std::string key = "cuda k" + std::to_string(k);
        const byte_vector want = binary(2000 + static_cast<std::size_t>(k), static_cast<unsigned char>(k));
        if (i % 13 == 0) {
          tier.remove(kDevice, key);
        } else if (const auto got = tier.get(kDevice, key).binary) {
          if (*got != want) corrupt.fetch_add(1);
          hits.fetch_add(1);
        } else {
          tier.put(kDevice, key, want);
        }
      }
      tier.flush(std::chrono::milliseconds(5000));
    });
  }
  for (auto& th : threads) th.join();
  tier.flush();
  EXPECT_EQ(corrupt.load(), 0);
  EXPECT_GT(hits.load(), 0);
  const auto& n = tier.counters();
  EXPECT_EQ(n.errors.load() + n.timeouts.load(), 0u);
  EXPECT_EQ(n.hits.load(), static_cast<std::uint64_t>(hits.load()));
}

// Build leases: one of the processes that miss builds, the others wait for
// its value.

TEST_F(RemoteTier, ALeaseGoesToOneAndTheOtherGetsTheHoldersValue) {
  redis_tier holder(config(), ""), waiter(config(), "");
  const std::string key = "cuda gemm";
  const lease_result granted = holder.lease(kDevice, key);
  ASSERT_EQ(granted.status, lease_status::granted);
  EXPECT_FALSE(granted.token.empty());
  lease_result waited;
  std::thread other([&] { waited = waiter.lease(kDevice, key); });
  ASSERT_TRUE(waits_within(waiter, std::chrono::seconds(10))) << "the waiter waits";
  // The holder builds, then puts and releases, in that order.
  holder.put(kDevice, key, binary(5000, 8));
  holder.release_lease(kDevice, key, granted.token);
  holder.flush();
  other.join();
  ASSERT_EQ(waited.status, lease_status::hit);
  EXPECT_EQ(waited.binary, binary(5000, 8));
  EXPECT_EQ(holder.counters().leases.load(), 1u);
  EXPECT_EQ(waiter.counters().leases.load(), 0u);
  EXPECT_EQ(waiter.counters().lease_hits.load(), 1u);
  waiter.flush();
  redis_connection c(config());
  EXPECT_EQ(c.command({"EXISTS", holder.redis().lease_key(kDevice, key)}).value, byte_vector{'0'}) << "released";
}

TEST_F(RemoteTier, LeasesAreHeldPerKey) {
  redis_tier a(config(), ""), b(config(), "");
  EXPECT_EQ(a.lease(kDevice, "cuda k1").status, lease_status::granted);
  EXPECT_EQ(b.lease(kDevice, "cuda k2").status, lease_status::granted) << "another kernel builds at once";
  EXPECT_EQ(b.lease(kOtherDevice, "cuda k1").status, lease_status::granted) << "another device's";
}

TEST_F(RemoteTier, AHolderThatGoesWithoutReleasingLosesTheLeaseAtItsTtl) {
  redis_tier holder(config("lease_ms=300"), ""), waiter(config("lease_ms=300"), "");
  ASSERT_EQ(holder.lease(kDevice, "cuda k").status, lease_status::granted);
  // The holder never puts (it died mid-build): the waiter's wait ends with
  // the lease, or at its own ttl, and it builds.
  const lease_result after = waiter.lease(kDevice, "cuda k");
  EXPECT_EQ(after.status, lease_status::granted) << "the dead holder's lease expired: the waiter builds";
  EXPECT_EQ(waiter.counters().lease_waits.load(), 1u);
  EXPECT_EQ(waiter.counters().lease_hits.load(), 0u);
  EXPECT_GE(waiter.counters().lease_wait_ms.load(), 200u) << "it waited for the lease to run out";
}

TEST_F(RemoteTier, AHolderWhoseBuildFailedHandsTheLeaseOn) {
  redis_tier holder(config(), ""), waiter(config(), "");
  const lease_result granted = holder.lease(kDevice, "cuda k");
  ASSERT_EQ(granted.status, lease_status::granted);
  lease_result next;
  std::thread other([&] { next = waiter.lease(kDevice, "cuda k"); });
  ASSERT_TRUE(waits_within(waiter, std::chrono::seconds(10))) << "the waiter waits";
  holder.release_lease(kDevice, "cuda k", granted.token);  // no value
  holder.flush();
  other.join();
  EXPECT_EQ(next.status, lease_status::granted) << "the waiter builds";
}

TEST_F(RemoteTier, ALeaseGrantedAfterTheHolderPutItsValueServesThatValue) {
  redis_tier first(config(), ""), second(config(), "");
  const lease_result granted = first.lease(kDevice, "cuda k");
  ASSERT_EQ(granted.status, lease_status::granted);
  // Between the second's miss and its lease, the first puts and releases.
  first.put(kDevice, "cuda k", binary(700, 2));
  first.release_lease(kDevice, "cuda k", granted.token);
  first.flush();
  const lease_result late = second.lease(kDevice, "cuda k");
  EXPECT_EQ(late.status, lease_status::hit) << "not built twice";
  EXPECT_EQ(late.binary, binary(700, 2));
  second.flush();
  redis_connection c(config());
  EXPECT_EQ(c.command({"EXISTS", first.redis().lease_key(kDevice, "cuda k")}).value, byte_vector{'0'});
}

TEST_F(RemoteTier, AReleaseEndsOnlyTheLeaseItsTokenHolds) {
  redis_tier late(config("lease_ms=100"), ""), next(config("lease_ms=5000"), "");
  const lease_result expired = late.lease(kDevice, "cuda k");
  ASSERT_EQ(expired.status, lease_status::granted);
  redis_connection c(config());
  const std::string where = late.redis().lease_key(kDevice, "cuda k");
  ASSERT_EQ(c.command({"PEXPIRE", where, "1"}).status, redis_status::ok);  // its ttl is over
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  ASSERT_EQ(next.lease(kDevice, "cuda k").status, lease_status::granted);
  late.release_lease(kDevice, "cuda k", expired.token);  // a slow holder, done at last
  late.flush();
  EXPECT_EQ(c.command({"EXISTS", where}).value, byte_vector{'1'}) << "the new holder's lease stays";
}

TEST_F(RemoteTier, NobodyWaitsWithLeasesOffOrTheServerGone) {
  redis_tier off(config("lease=0"), "");
  EXPECT_EQ(off.lease(kDevice, "cuda k").status, lease_status::none);
  redis_tier read_only(config("read_only=1"), "");
  EXPECT_EQ(read_only.lease(kDevice, "cuda k").status, lease_status::none) << "it could not publish";
  redis_connection c(config());
  EXPECT_EQ(c.command({"DBSIZE"}).value, byte_vector{'0'}) << "no lease asked for";
  redis_tier tier(config("connect_timeout_ms=100&timeout_ms=200"), "");
  server_.kill();
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(tier.lease(kDevice, "cuda k").status, lease_status::none);
  EXPECT_EQ(tier.lease(kDevice, "cuda k").status, lease_status::none) << "the breaker is open";
  ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(tier.counters().errors.load() + tier.counters().timeouts.load(), 1u);
}

TEST_F(RemoteTier, AWaiterRefusesAForgedValueAndBuildsItself) {
  redis_tier holder(config(), "a secret for this test, long enough"), waiter(config(), "a secret for this test, long enough");
  redis_tier forger(config(), "");  // no secret: its values are unsigned
  ASSERT_EQ(holder.lease(kDevice, "cuda k").status, lease_status::granted);
  lease_result waited;
  std::thread other([&] { waited = waiter.lease(kDevice, "cuda k"); });
  ASSERT_TRUE(waits_within(waiter, std::chrono::seconds(10))) << "the waiter waits";
  plant(holder.redis().entry_key(kDevice, "cuda k"), forger.encode(kDevice, "cuda k", binary(100, 1)));
  other.join();
  EXPECT_EQ(waited.status, lease_status::none);
  EXPECT_EQ(waited.binary, std::nullopt) << "never served";
  EXPECT_EQ(waiter.counters().rejected.load(), 1u);
}

}  // namespace
}  // namespace unicache
