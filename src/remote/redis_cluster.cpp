// redis_cluster (remote/redis_cluster.hpp): the router, which sends each
// key's command to the node that serves its slot, follows MOVED and ASK, and
// reloads the slot map (the checks of what nodes answer, and key slots, are
// redis_cluster_replies.cpp's).
#include "remote/redis_cluster.hpp"

#include <unistd.h>

#include <algorithm>
#include <system_error>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "unicache/error.hpp"
#include "util/env.hpp"
#include "util/parse.hpp"

namespace unicache::redis {

using namespace unicache::detail;  // the core's store internals (entry format, tiers, utilities)
namespace {

constexpr int kMaxRedirections = 5;
constexpr std::size_t kMaxIdlePerNode = 8;
constexpr auto kLoadInterval = std::chrono::milliseconds(100);
constexpr std::size_t kMaxSlotsReplyBytes = std::size_t{4} << 20;

// The router's configuration for one of its nodes: not a cluster's.
redis_config config_of_node(const redis_config& cluster, const redis_node& address) {
  redis_config c = cluster;
  c.host = address.host;
  c.port = address.port;
  c.cluster = false;
  c.seeds.clear();
  return c;
}

std::vector<redis_node> seeds_of(const redis_config& c) {
  return c.seeds.empty() ? std::vector<redis_node>{{c.host, c.port}} : c.seeds;
}

redis_result failed(redis_status status, std::string message) { return {status, {}, std::move(message)}; }

std::int64_t steady_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

// One node: its address and its pool of idle connections.
struct redis_cluster::node {
  node(const redis_config& cluster, redis_node where)
      : address(std::move(where)), name(node_name(address)), config(config_of_node(cluster, address)) {}

  std::unique_ptr<redis_connection> take() {
    {
      mutex_lock l(&mu);
      if (!idle.empty()) {
        std::unique_ptr<redis_connection> c = std::move(idle.back());
        idle.pop_back();
        return c;
      }
    }
    return std::make_unique<redis_connection>(config);
  }
  void give_back(std::unique_ptr<redis_connection> c) {
    mutex_lock l(&mu);
    if (idle.size() < kMaxIdlePerNode) idle.push_back(std::move(c));
  }

  // The node's own breaker: after a failure the rest of the cluster did
  // not share, the node's slots fail at once (unavailable) for the
  // configuration's breaker_s, then one call probes it.
  bool admits() {
    const std::int64_t until = down_until_ns.load(std::memory_order_acquire);
    if (until == 0) return true;
    if (steady_ns() < until) return false;
    bool expected = false;
    return probing.compare_exchange_strong(expected, true, std::memory_order_acq_rel);
  }
  void answered() {
    if (down_until_ns.load(std::memory_order_relaxed) == 0) return;
    down_until_ns.store(0, std::memory_order_release);
    probing.store(false, std::memory_order_release);
  }
  void failed_alone() {
    down_until_ns.store(steady_ns() + std::int64_t{config.breaker_s} * 1'000'000'000, std::memory_order_release);
    probing.store(false, std::memory_order_release);
  }

  const redis_node address;
  const std::string name;  // host:port
  const redis_config config;
  mutex mu;
  std::vector<std::unique_ptr<redis_connection>> idle ABSL_GUARDED_BY(mu);
  std::atomic<std::int64_t> down_until_ns{0};  // steady clock; 0: up
  std::atomic<bool> probing{false};
};

redis_cluster::redis_cluster(redis_config config) : config_(std::move(config)), seeds_(seeds_of(config_)) {
  if (config_.db != 0) throw invalid_argument("a Redis Cluster has only database 0, not " + std::to_string(config_.db));
  {
    mutex_lock l(&mu_);
    slot_master_.fill(cluster_slot_map::kNoMaster);
  }
  try {
    loader_ = std::thread([this] { load_loop(); });
  } catch (const std::system_error& e) {
    // No thread to be had (a process at its limit): the library's own error.
    throw remote_error(std::string("Redis Cluster router: cannot start its thread: ") + e.what());
  }
}

redis_cluster::~redis_cluster() {
  {
    mutex_lock l(&mu_);
    stopping_ = true;
  }
  stop_loading_ = true;
  load_wanted_cv_.notify_all();
  // A child of fork() has no loader thread to wait for.
  if (::getpid() == owner_) {
    loader_.join();
  } else {
    loader_.detach();
  }
}

redis_cluster_stats redis_cluster::statistics() const {
  return {moved_.load(), asked_.load(), map_loads_.load(), failed_loads_.load()};
}

void redis_cluster::refresh_slots() {
  {
    mutex_lock l(&mu_);
    load_wanted_ = true;
  }
  load_wanted_cv_.notify_one();
}

// The map loader --------------------------------------------------------

void redis_cluster::load_loop() {
  for (;;) {
    std::vector<redis_node> candidates;
    std::uint64_t number = 0;
    {
      mutex_lock l(&mu_);
      mu_.wait(load_wanted_cv_, [&]() ABSL_NO_THREAD_SAFETY_ANALYSIS { return load_wanted_ || stopping_; });
      // At most one load per kLoadInterval, however many ask.
      const clock::time_point next = last_load_ + kLoadInterval;
      if (!stopping_ && clock::now() < next) {
        mu_.wait_for(load_wanted_cv_, next - clock::now(), [&]() ABSL_NO_THREAD_SAFETY_ANALYSIS { return stopping_; });
      }
      if (stopping_) return;
      load_wanted_ = false;
      loading_ = true;
      number = loads_ended_ + 1;
      // The masters known, then the seeds; a node that just failed last.
      const std::string suspect = std::exchange(suspect_, std::string());
      std::vector<redis_node> last;
      const auto add = [&](const redis_node& n) {
        for (const auto* list : {&candidates, &last}) {
          for (const redis_node& c : *list) {
            if (c.host == n.host && c.port == n.port) return;
          }
        }
        (node_name(n) == suspect ? last : candidates).push_back(n);
      };
      for (const auto& n : nodes_) add(n->address);
      for (const redis_node& n : seeds_) add(n);
      candidates.insert(candidates.end(), last.begin(), last.end());
    }
    std::optional<cluster_slot_map> map;
    std::string why = "no node to ask";
    for (const redis_node& n : candidates) {
      if (stop_loading_) break;
      map = load_from(n, why);
      if (map) break;
    }
    mutex_lock l(&mu_);
    if (map) {
      install(std::move(*map));
      last_load_ok_ = true;
      ++map_loads_;
    } else {
      last_load_error_ = why;
      last_load_ok_ = false;
      ++failed_loads_;
    }
    last_load_ = clock::now();
    loading_ = false;
    loads_ended_ = number;
    load_done_cv_.notify_all();
  }
}

std::optional<cluster_slot_map> redis_cluster::load_from(const redis_node& address, std::string& why) {
  redis_connection c(config_of_node(config_, address));
  redis_element reply;
  const redis_result r = c.command({"CLUSTER", "SLOTS"}, kMaxSlotsReplyBytes, reply);
  if (r.status != redis_status::ok) {
    why = r.message;
    return std::nullopt;
  }
  std::string problem;
  auto map = parse_cluster_slots(reply, address.host, problem);
  if (!map) why = "the slot map of " + node_name(address) + " (CLUSTER SLOTS): " + problem;
  return map;
}

void redis_cluster::install(cluster_slot_map map) {
  // Nodes still in the map keep their pools.
  absl::flat_hash_map<std::string, std::shared_ptr<node>> known;
  for (auto& n : nodes_) known.emplace(n->name, std::move(n));
  nodes_.clear();
  for (redis_node& address : map.masters) {
    const auto it = known.find(node_name(address));
    nodes_.push_back(it != known.end() ? std::move(it->second) : std::make_shared<node>(config_, std::move(address)));
  }
  slot_master_ = map.slot_master;
  map_loaded_ = true;
}

bool redis_cluster::wait_for_load(clock::time_point deadline, const node* suspect) {
  mutex_lock l(&mu_);
  // A load that started before this call may have asked the failed node:
  // wait for the next one.
  const std::uint64_t wanted = loads_ended_ + (loading_ ? 2 : 1);
  load_wanted_ = true;
  if (suspect) suspect_ = suspect->name;
  load_wanted_cv_.notify_one();
  const auto left = deadline - clock::now();
  if (left <= clock::duration::zero()) return false;
  return mu_.wait_for(load_done_cv_, left, [&]() ABSL_NO_THREAD_SAFETY_ANALYSIS { return loads_ended_ >= wanted; });
}

// Routing ---------------------------------------------------------------

std::shared_ptr<redis_cluster::node> redis_cluster::node_at_locked(const redis_node& address, std::uint16_t* index) {
  const std::string name = node_name(address);
  for (std::size_t i = 0; i < nodes_.size(); ++i) {
    if (nodes_[i]->name == name) {
      if (index) *index = static_cast<std::uint16_t>(i);
      return nodes_[i];
    }
  }
  auto n = std::make_shared<node>(config_, address);
  // A redirection names a node the map does not have yet: it joins the
  // map's nodes (within bounds; past them it serves this call only).
  if (nodes_.size() < 2 * cluster_slot_map::kMaxMasters) {
    if (index) *index = static_cast<std::uint16_t>(nodes_.size());
    nodes_.push_back(n);
  }
  return n;
}

std::shared_ptr<redis_cluster::node> redis_cluster::follow(const redis_redirect& redirect) {
  bool load = false;
  std::shared_ptr<node> target;
  {
    mutex_lock l(&mu_);
    std::uint16_t index = cluster_slot_map::kNoMaster;
    target = node_at_locked(redirect.target, redirect.ask ? nullptr : &index);
    if (!redirect.ask) {
      // MOVED: the slot is the target's now, and others may have moved too.
      if (index != cluster_slot_map::kNoMaster) slot_master_[redirect.slot] = index;
      load = !load_wanted_;
      load_wanted_ = true;
    }
  }
  if (load) load_wanted_cv_.notify_one();
  (redirect.ask ? asked_ : moved_)++;
  return target;
}

redis_cluster::slot_route redis_cluster::route(std::uint16_t slot, clock::time_point deadline) {
  for (int attempt = 0;; ++attempt) {
    {
      mutex_lock l(&mu_);
      const std::uint16_t index = slot_master_[slot];
      if (index != cluster_slot_map::kNoMaster) return {nodes_[index], {}};
      if (attempt == 1) {
        const std::string cluster = "the Redis Cluster " + config_.to_string();
        std::string why = map_loaded_ ? "no master of " + cluster + " serves slot " + std::to_string(slot)
                                      : "no slot map of " + cluster + ": " + last_load_error_;
        return {nullptr, failed(redis_status::error, std::move(why))};
      }
    }
    if (!wait_for_load(deadline, nullptr)) {
      mutex_lock l(&mu_);
      std::string why = "loading the slot map of the Redis Cluster " + config_.to_string() + ": timed out";
      if (!last_load_error_.empty()) why += " (the last load: " + last_load_error_ + ")";
      return {nullptr, failed(redis_status::timeout, std::move(why))};
    }
  }
}

std::vector<redis_config> redis_cluster::masters() {
  bool loaded = false;
  {
    mutex_lock l(&mu_);
    loaded = map_loaded_;
  }
  if (!loaded) {
    wait_for_load(clock::now() + std::chrono::milliseconds(config_.connect_timeout_ms + config_.timeout_ms), nullptr);
  }
  mutex_lock l(&mu_);
  std::vector<bool> serves(nodes_.size());
  for (const std::uint16_t index : slot_master_) {
    if (index != cluster_slot_map::kNoMaster) serves[index] = true;
  }
  std::vector<redis_config> out;
  for (std::size_t i = 0; i < nodes_.size(); ++i) {
    if (serves[i]) out.push_back(nodes_[i]->config);
  }
  return out;
}

template <typename Op>
redis_result redis_cluster::on_node(node& n, bool asking, clock::time_point deadline, Op& op,
                                    std::string& server_error) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - clock::now()).count();
  if (left <= 0) return failed(redis_status::timeout, "the Redis Cluster node " + n.name + ": timed out");
  std::unique_ptr<redis_connection> c = n.take();
  c->set_timeout_ms(static_cast<std::uint32_t>(left));
  redis_result r;
  if (asking) r = c->command({"ASKING"});
  if (!asking || r.status == redis_status::ok) r = op(*c);
  server_error = c->server_error();
  // One that failed is dropped, not pooled.
  if (r.status != redis_status::error && r.status != redis_status::timeout) n.give_back(std::move(c));
  return r;
}

redis_result redis_cluster::node_failed(node& n, redis_result r) {
  bool others_answer = false;
  {
    mutex_lock l(&mu_);
    others_answer = last_load_ok_;
  }
  if (!others_answer) return r;  // the cluster as a whole: the caller's breaker decides
  n.failed_alone();
  r.status = redis_status::unavailable;
  r.message += "; the other masters answer: this node's slots are skipped for " + std::to_string(config_.breaker_s) +
               " s";
  return r;
}

template <typename Op>
redis_result redis_cluster::routed(std::string_view key, Op op) {
  const clock::time_point deadline = clock::now() + std::chrono::milliseconds(config_.timeout_ms);
  const std::uint16_t slot = key_slot(key);
  slot_route to = route(slot, deadline);
  if (!to.target) return to.failure;
  bool asking = false, retried = false;
  // The node this call was admitted to (once per node: the probe, when it
  // was down); whatever way the call ends, it holds no probe after.
  struct admission {
    std::shared_ptr<node> n;
    ~admission() {
      if (n) n->probing.store(false, std::memory_order_release);
    }
  } admitted;
  for (int redirections = 0;;) {
    if (admitted.n != to.target) {
      if (!to.target->admits()) {
        return failed(redis_status::unavailable, "the cluster node " + to.target->name +
                                                     " failed while others answered: its slots are skipped for now");
      }
      if (admitted.n) admitted.n->probing.store(false, std::memory_order_release);
      admitted.n = to.target;
    }
    std::string answer;
    redis_result r = on_node(*to.target, asking, deadline, op, answer);
    asking = false;
    if (r.status != redis_status::error && r.status != redis_status::timeout) to.target->answered();
    if (r.status == redis_status::refused && (answer.starts_with("MOVED ") || answer.starts_with("ASK "))) {
      const auto redirect = parse_redirect(answer, to.target->address.host);
      if (!redirect) return failed(redis_status::error, "a malformed redirection: " + r.message);
      if (++redirections > kMaxRedirections) {
        return failed(redis_status::error, "more than 5 redirections for slot " + std::to_string(slot) +
                                               "; the last: " + r.message);
      }
      to.target = follow(*redirect);
      asking = redirect->ask;
      continue;
    }
    // CLUSTERDOWN, TRYAGAIN and the rest: refused, as the server said.
    if (r.status != redis_status::error && r.status != redis_status::timeout) return r;
    // The node failed: once more, with a map loaded from another node.
    // Failing again after that load found the others answering, it is down
    // alone; without a new load in time (a timeout used the call's time),
    // or with the whole cluster failing, the failure is the caller's.
    if (retried) return node_failed(*to.target, std::move(r));
    if (clock::now() >= deadline || !wait_for_load(deadline, to.target.get())) return r;
    retried = true;
    slot_route again = route(slot, deadline);
    if (!again.target) return r;
    to = std::move(again);
  }
}

redis_result redis_cluster::get(std::string_view key, std::size_t max_bytes) {
  return routed(key, [&](redis_connection& c) { return c.get(key, max_bytes); });
}

redis_result redis_cluster::set(std::string_view key, std::span<const unsigned char> value) {
  return routed(key, [&](redis_connection& c) { return c.set(key, value); });
}

redis_result redis_cluster::del(std::string_view key) {
  return routed(key, [&](redis_connection& c) { return c.del(key); });
}

redis_result redis_cluster::hgetall(std::string_view key, std::vector<std::string>& pairs) {
  // A try that was redirected or failed leaves nothing in `pairs`.
  const std::size_t before = pairs.size();
  return routed(key, [&](redis_connection& c) {
    pairs.resize(before);
    return c.hgetall(key, pairs);
  });
}

redis_result redis_cluster::command(std::string_view routing_key, const std::vector<std::string_view>& args) {
  return routed(routing_key, [&](redis_connection& c) { return c.command(args); });
}

}  // namespace unicache::redis
