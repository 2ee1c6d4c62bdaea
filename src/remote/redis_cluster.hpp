// A Redis Cluster client: each key goes to the master that serves its hash
// slot, over redis_connection (remote/redis_client.hpp) to each node, with
// that class's bounds and timeouts. hiredis has no cluster support and
// hiredis-cluster is not in Debian 12, so this is our own, kept small.
//
//   redis_cluster cluster(parse_redis_url("redis://10.0.0.1:7000,10.0.0.2:7000"));
//   cluster.set("k", value);                       // to the master of key_slot("k")
//   redis_result r = cluster.get("k", 1 << 20);     // hit, miss, error, timeout or refused
//
// The slot map (CLUSTER SLOTS) is loaded from whichever seed or known node
// answers, on first use and again after a redirection or a node's failure,
// by a thread of the router's own (at most one load per 100 ms). Node
// addresses and slot ranges are the servers' word, untrusted: a reply out of
// shape or bounds is an error, the map stays as it was.
#pragma once

#include <sys/types.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "remote/redis_client.hpp"
#include "unicache/remote.hpp"
#include "util/mutex.hpp"

namespace unicache::redis {

// What it uses of the core's internals.
using detail::mutex;

inline constexpr std::size_t kClusterSlots = 16384;

// CRC16-XMODEM (polynomial 0x1021, initial 0), as Redis Cluster hashes keys:
// crc16("123456789") == 0x31C3.
std::uint16_t crc16(std::string_view data);

// The hash slot of `key`, 0..16383, as Redis computes it: the CRC of the
// hash tag when the key has one (the text between the first '{' and the
// first '}' after it, when that is not empty), else of the whole key.
std::uint16_t key_slot(std::string_view key);

// "host:port" ("[v6]:port"): what names a node in messages and maps.
std::string node_name(const redis_node& n);

// A MOVED or ASK error reply, parsed ("MOVED 3999 10.0.0.2:6381").
struct redis_redirect {
  bool ask = false;  // ASK: this command only; MOVED: the slot has moved
  std::uint16_t slot = 0;
  redis_node target;
};
// `error` as a redirection, or nullopt when it is none or is malformed (a
// slot out of range, a target that is not host:port, a bad host or port).
// An empty or "?" host is `answering_host`'s (the node that sent it).
std::optional<redis_redirect> parse_redirect(std::string_view error, std::string_view answering_host);

// A CLUSTER SLOTS reply, checked: each slot's master as an index into
// `masters`, or kNoMaster where no range covers the slot.
struct cluster_slot_map {
  static constexpr std::uint16_t kNoMaster = 0xFFFF;
  std::vector<redis_node> masters;  // at most kMaxMasters, each once
  std::array<std::uint16_t, kClusterSlots> slot_master;
  static constexpr std::size_t kMaxMasters = 1024;
};
// The map that `reply` describes, or nullopt with `why` set: not an array,
// a range out of 0..16383 or reversed, a master that is not [host, port,
// ...], a bad host or port, more than kMaxMasters masters, or no range at
// all. A host that is empty, "?" or nil is `answering_host`.
std::optional<cluster_slot_map> parse_cluster_slots(const redis_element& reply, std::string_view answering_host,
                                                    std::string& why);

// What the router did, counted since it was made (tests and diagnostics).
struct redis_cluster_stats {
  std::uint64_t moved = 0;          // MOVED redirections followed
  std::uint64_t asked = 0;          // ASK redirections followed
  std::uint64_t map_loads = 0;      // slot maps loaded and installed
  std::uint64_t failed_loads = 0;   // loads that found no node to answer well
};

// Thread-safe: any number of threads may call it at once; each call takes a
// pooled connection of the node it needs. No call throws (but for
// std::bad_alloc); each returns within the configuration's timeout_ms, plus
// connect_timeout_ms for each connection it opens (at most 7 tries: the
// first, 5 redirections, one after a node failed). A command whose node
// failed (an error, not a timeout: a timeout uses up the call's time) is
// sent once more, perhaps to a new master: a command that must not run
// twice needs a guard of its own, as the counter reports' script has.
class redis_cluster {
 public:
  // Starts nothing but the map-loading thread (no connection until the
  // first call). The seeds are config.seeds, or config.host:port where
  // that is empty. Throws invalid_argument for a database other than 0,
  // remote_error when its thread cannot start.
  explicit redis_cluster(redis_config config);
  // Waits for a map load under way (bounded by its timeouts) and closes
  // every connection.
  ~redis_cluster();
  redis_cluster(const redis_cluster&) = delete;
  redis_cluster& operator=(const redis_cluster&) = delete;

  // As redis_connection's, on the master of the key's slot. CLUSTERDOWN
  // and TRYAGAIN answers are refused; a redirection that cannot be
  // followed (malformed, or more than 5) is an error. A master that fails
  // twice in a call, around a map load that found the others answering, is
  // `unavailable`, and its slots are then unavailable at once for breaker_s
  // seconds (the router's breaker per node), after which one call probes
  // it; the other slots go on. A timeout (it uses the call's time) stays a
  // timeout.
  redis_result get(std::string_view key, std::size_t max_bytes);
  redis_result set(std::string_view key, std::span<const unsigned char> value);
  redis_result del(std::string_view key);
  redis_result hgetall(std::string_view key, std::vector<std::string>& pairs);
  // Any command, on the master of `routing_key`'s slot (the command's keys
  // must all hash there: give them one hash tag).
  redis_result command(std::string_view routing_key, const std::vector<std::string_view>& args);

  // One configuration per master that serves a slot in the current map
  // (loaded first when there is none, within the timeouts): host and port
  // that master's, not a cluster's (for SCAN, which walks one node). Empty
  // when no node answered.
  std::vector<redis_config> masters();

  // Asks for a new slot map (returns at once; the load is rate-limited).
  void refresh_slots();

  redis_cluster_stats statistics() const;
  const redis_config& config() const { return config_; }

 private:
  struct node;
  struct slot_route {
    std::shared_ptr<node> target;
    redis_result failure;  // why there is no target (error or timeout)
  };
  using clock = std::chrono::steady_clock;

  // `op` (one of the calls above, on a connection) on the key's master,
  // following redirections and retrying once after a node fails.
  template <typename Op>
  redis_result routed(std::string_view key, Op op);
  template <typename Op>
  redis_result on_node(node& n, bool asking, clock::time_point deadline, Op& op, std::string& server_error);
  // `r`, the second failure of `n` in one call, after a map load that
  // ended during the call: unavailable (and `n` skipped for breaker_s) when
  // that load found other nodes answering, else as it is.
  redis_result node_failed(node& n, redis_result r) ABSL_LOCKS_EXCLUDED(mu_);
  // The master of `slot`, the map loaded first when it has none.
  slot_route route(std::uint16_t slot, clock::time_point deadline) ABSL_LOCKS_EXCLUDED(mu_);
  // The redirection's node; MOVED also updates the slot and asks for a load.
  std::shared_ptr<node> follow(const redis_redirect& redirect) ABSL_LOCKS_EXCLUDED(mu_);
  // The node at `address`, and (when `index`) its index in nodes_, or
  // kNoMaster when nodes_ is full.
  std::shared_ptr<node> node_at_locked(const redis_node& address, std::uint16_t* index)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Asks for a load (`suspect`, if any, asked last) and waits until one
  // ends or `deadline` passes; whether one ended.
  bool wait_for_load(clock::time_point deadline, const node* suspect) ABSL_LOCKS_EXCLUDED(mu_);

  void load_loop() ABSL_LOCKS_EXCLUDED(mu_);
  std::optional<cluster_slot_map> load_from(const redis_node& address, std::string& why);
  void install(cluster_slot_map map) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const redis_config config_;
  const std::vector<redis_node> seeds_;

  mutable mutex mu_;
  std::condition_variable_any load_wanted_cv_, load_done_cv_;
  // The map: each slot's master, an index into nodes_ (kNoMaster: none).
  std::array<std::uint16_t, kClusterSlots> slot_master_ ABSL_GUARDED_BY(mu_);
  std::vector<std::shared_ptr<node>> nodes_ ABSL_GUARDED_BY(mu_);
  bool map_loaded_ ABSL_GUARDED_BY(mu_) = false;
  bool load_wanted_ ABSL_GUARDED_BY(mu_) = false;
  bool loading_ ABSL_GUARDED_BY(mu_) = false;
  std::string suspect_ ABSL_GUARDED_BY(mu_);  // "host:port" of a node that failed: asked last
  std::uint64_t loads_ended_ ABSL_GUARDED_BY(mu_) = 0;
  std::string last_load_error_ ABSL_GUARDED_BY(mu_);
  bool last_load_ok_ ABSL_GUARDED_BY(mu_) = false;  // whether the last load found a node that answered
  clock::time_point last_load_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;

  std::atomic<std::uint64_t> moved_{0}, asked_{0}, map_loads_{0}, failed_loads_{0};
  std::atomic<bool> stop_loading_{false};  // read between nodes by a load under way
  const pid_t owner_ = ::getpid();  // the process whose thread loader_ is
  std::thread loader_;  // last: started when the rest is ready
};

}  // namespace unicache::redis
