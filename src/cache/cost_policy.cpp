// COST: GreedyDual-Size-Frequency (Cherkasova, 1998) behind an admission
// window, in the structure of W-TinyLFU (Einziger et al., 2017), adapted to
// entries of very different sizes.
//
// - A new entry enters the window, a FIFO queue of 1% of the capacity (and
//   at least the newest entry). Hits there cost nothing: a kernel used three
//   more times within the request that built it stays while the window
//   holds it.
// - The window's oldest entry, when the window needs its room, faces
//   admission to the main region. Its priority there would be
//       L + uses x cost / size
//   with `uses` everything known of the key: uses remembered from before it
//   was cached (halving as insertions go by) plus its uses since. It is
//   admitted only if it beats every main-region entry it would displace,
//   lowest priority first; those are then evicted. Otherwise it is evicted
//   itself ("refused") and its uses are remembered, so a key that keeps
//   coming back gets in. An entry whose cost is not known yet (get_or_build
//   reports it once built) is judged at the cost remembered for its key,
//   else admitted, and is never given up for another while its build is in
//   flight.
// - A new entry larger than the window's share would push the whole window
//   out and make each leaver find room for it too. When the device is full
//   it is judged first, against the main region as if the window were
//   empty and on this one use (its history is of a time it did not stay):
//   unless it would win that room, it is not cached and the window keeps
//   what it holds (a 2 MB weight that packs in a millisecond, once that
//   cost is known, never pushes out the kernel of the request in flight).
// - The main region is plain GDSF on the uses while cached: an entry's
//   priority is L at its last use plus (1 + hits) x cost / size, and L (the
//   inflation value, the device's clock) rises to the priority of each
//   entry evicted from it, so what stays unused ages.
//
// - Aging is bounded: nothing is evicted on a newcomer's behalf, from the
//   main region or from the window to make it room, that is worth more than
//   kAgingLimit times the newcomer per byte (every known use x cost /
//   size). In a small cache one eviction can raise L by a whole expensive
//   entry's priority, after which anything new outranked every older entry:
//   a 1 µs copy would evict a 1 s compile. The newcomer is turned away
//   instead, and its use remembered.
//
// The history of evicted and refused keys is bounded: 1,024 keys plus 4 per
// cached entry, the oldest forgotten first.
//
// Measured by bench_policy on synthetic Zipf traces and on traces recorded
// from bench_dynamic_shapes, against LRU, GDSF and SIEVE: docs/benchmarks.md.
#include <algorithm>
#include <bit>
#include <limits>
#include <cmath>
#include <deque>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "cache/eviction_queue.hpp"
#include "cache/policy.hpp"

namespace unicache::detail {
namespace {

constexpr double kWindowShare = 0.01;
// How far aging alone can lower an entry's standing: a newcomer, or an entry
// leaving the window, never displaces an entry worth more than this many
// times as much per byte (uses x cost / size, remembered uses included),
// however long ago that entry was last used. GreedyDual's inflation still
// orders everything else.
constexpr double kAgingLimit = 128;
constexpr std::size_t kGhostsMin = 1024;
constexpr std::size_t kGhostsPerEntry = 4;

enum region : std::uint8_t { outside = 0, window = 1, main = 2 };

class cost_policy final : public cache_policy {
 public:
  explicit cost_policy(std::atomic<std::uint64_t>& clock) : cache_policy(clock) {
    clock_.store(std::bit_cast<std::uint64_t>(0.0), std::memory_order_relaxed);
  }

  void set_capacity(std::uint64_t bytes) override {
    window_capacity_ = static_cast<std::uint64_t>(static_cast<double>(bytes) * kWindowShare);
  }

  void on_insert(entry* e) override {
    ++inserts_;
    ++resident_;
    recall(e);
    e->stamp.store(clock_.load(std::memory_order_relaxed), std::memory_order_relaxed);
    e->region = window;
    e->heap_index = window_base_ + static_cast<std::uint32_t>(window_.size());  // not in a heap: its window slot
    window_.push_back(e);
    window_bytes_ += e->size_bytes;
  }

  // Entries cached under another policy were admitted there: main region.
  void on_adopt(entry* e) override {
    ++resident_;
    e->region = main;
    main_.push(e, priority_of(e));
  }

  void on_update(entry* e, std::uint64_t old_size) override {
    if (e->region == window) {
      window_bytes_ = window_bytes_ - old_size + e->size_bytes;
    } else if (e->region == main) {
      main_.update(e, priority_of(e));
    }
  }

  void on_remove(entry* e) override {
    --resident_;
    if (e->region == window) {
      unlink(e);
    } else if (e->region == main) {
      main_.erase(e);
    }
    e->region = outside;
  }

  bool make_room(std::uint64_t target, const entry* incoming, policy_host& host) override {
    const std::uint64_t incoming_bytes = incoming ? incoming->size_bytes : 0;
    // Nothing evicted on the newcomer's behalf, from either region, may be
    // worth more than kAgingLimit times the newcomer (a shrink has none).
    newcomer_worth_ = incoming ? worth_of_new(incoming) : std::numeric_limits<double>::infinity();
    // Larger than the window's share, it would push the whole window out
    // and make each leaver find room for it as well: unless it would win
    // that room from the main region on this use alone, it goes now, and
    // the window keeps what it holds. Its history does not count here: it
    // is of a time the key did not stay (a weight asked for once per
    // request by a cache smaller than the request's weights is asked for
    // often and never hit); a window leaver's uses in the window show that
    // its history is live.
    if (incoming && incoming_bytes > window_capacity_ && host.used_bytes() > target &&
        !admits_new(incoming, /*count_history=*/false, target + incoming_bytes, host, /*dry_run=*/true)) {
      return false;
    }
    // The window keeps its share: its oldest leave as new entries arrive.
    while (!window_.empty() && window_bytes_ + incoming_bytes > window_capacity_) {
      if (!leave_window(target, host)) return refuse(incoming);
    }
    while (!window_.empty() && host.used_bytes() > target) {
      if (!leave_window(target, host)) return refuse(incoming);
    }
    // No window left to give room: the new entry itself faces admission,
    // as it would on leaving the window.
    if (incoming && host.used_bytes() > target &&
        !admits_new(incoming, /*count_history=*/true, main_capacity(target + incoming_bytes), host,
                    /*dry_run=*/false)) {
      return false;
    }
    while (host.used_bytes() > target) {  // a shrink
      double priority = 0;
      entry* v = main_.victim(priority_of, &priority);
      if (!v) break;
      main_.erase(v);
      evict_from_main(v, priority, host);
    }
    return true;
  }

 private:
  double inflation() const { return std::bit_cast<double>(clock_.load(std::memory_order_relaxed)); }

  static double per_byte(const entry* e) {
    return static_cast<double>(e->cost_ns.load(std::memory_order_relaxed)) /
           static_cast<double>(std::max<std::uint64_t>(e->size_bytes, 1));
  }
  static double uses_while_cached(const entry* e) {
    return 1.0 + static_cast<double>(e->hits.load(std::memory_order_relaxed));
  }
  // What a cached entry is worth per byte, aging aside: every use known of
  // its key (remembered from before it was cached, and since) x cost / size.
  // Infinite while its cost is unknown (its build in flight).
  static double worth(const entry* e) {
    if (e->awaiting_cost || e->cost_ns.load(std::memory_order_relaxed) <= 0) return std::numeric_limits<double>::infinity();
    return (e->history + uses_while_cached(e)) * per_byte(e);
  }
  // The same for a new entry, not cached yet: this use and its key's
  // remembered ones, at its cost or the cost remembered for its key.
  // Infinite while the cost is unknown (a first get_or_build): such an
  // entry is admitted as before, and judged at its real cost once built.
  double worth_of_new(const entry* e) const {
    double cost = e->cost_ns.load(std::memory_order_relaxed);
    double uses = 1.0;
    if (const auto g = ghosts_.find(e->hash); g != ghosts_.end()) {
      uses += decayed(g->second);
      if (cost <= 0) cost = g->second.cost_ns;
    }
    if (cost <= 0) return std::numeric_limits<double>::infinity();
    return uses * cost / static_cast<double>(std::max<std::uint64_t>(e->size_bytes, 1));
  }
  // Main region: L at the last use (the stamp) plus GDSF's term. An entry
  // still being built (its cost unknown) is not given up for another while
  // its builder works: infinite, until on_update gives it its cost.
  static double priority_of(const entry* e) {
    if (e->awaiting_cost) return std::numeric_limits<double>::infinity();
    return std::bit_cast<double>(e->stamp.load(std::memory_order_relaxed)) + uses_while_cached(e) * per_byte(e);
  }

  void unlink(entry* e) {
    window_[e->heap_index - window_base_] = nullptr;  // unsigned: wraps consistently
    while (!window_.empty() && !window_.front()) {
      window_.pop_front();
      ++window_base_;
    }
    window_bytes_ -= e->size_bytes;
  }

  // Turns the new entry away (a window entry worth far more would have had
  // to go for it), remembering this use of its key.
  bool refuse(const entry* incoming) {
    const auto g = ghosts_.find(incoming->hash);
    double cost = incoming->cost_ns.load(std::memory_order_relaxed);
    if (cost <= 0 && g != ghosts_.end()) cost = g->second.cost_ns;
    remember(incoming->hash, static_cast<float>(1.0 + (g == ghosts_.end() ? 0.0 : decayed(g->second))),
             static_cast<float>(cost));
    return false;
  }

  // Whether the new entry `incoming`, not yet cached, wins room in a main
  // region that may hold `capacity` (evicting what it displaces unless
  // `dry_run`), counting `uses`. A refused key is remembered with this use
  // added to its history.
  bool admits_new(const entry* incoming, bool count_history, std::uint64_t capacity, policy_host& host,
                  bool dry_run) {
    const auto g = ghosts_.find(incoming->hash);
    const double history = g == ghosts_.end() ? 0.0 : decayed(g->second);
    // get_or_build reports the cost once built: until then a key seen
    // before is judged at the cost it had.
    double cost = incoming->cost_ns.load(std::memory_order_relaxed);
    if (cost <= 0 && g != ghosts_.end()) cost = g->second.cost_ns;
    if (take_room(incoming, cost, 1.0 + (count_history ? history : 0.0), newcomer_worth_, capacity,
                  host.used_bytes() - window_bytes_, host, dry_run)) {
      return true;
    }
    remember(incoming->hash, static_cast<float>(1.0 + history), static_cast<float>(cost));
    return false;
  }

  // The window's oldest entry goes to the main region if it beats every
  // entry it would displace there, else out. Unless it is worth more than
  // kAgingLimit times the newcomer it leaves for: then it stays at the
  // window's front and false says the newcomer is turned away instead.
  bool leave_window(std::uint64_t target, policy_host& host) {
    entry* c = window_.front();
    unlink(c);
    c->region = outside;
    const double uses = c->history + uses_while_cached(c);
    if (take_room(c, c->cost_ns.load(std::memory_order_relaxed), uses, worth(c), main_capacity(target),
                  host.used_bytes() - c->size_bytes - window_bytes_, host)) {
      c->region = main;
      c->stamp.store(clock_.load(std::memory_order_relaxed), std::memory_order_relaxed);
      main_.push(c, priority_of(c));
      return true;
    }
    if (worth(c) > kAgingLimit * newcomer_worth_) {
      window_.push_front(c);
      --window_base_;
      c->heap_index = window_base_;
      window_bytes_ += c->size_bytes;
      c->region = window;
      return false;
    }
    remember(c->hash, static_cast<float>(uses), c->cost_ns.load(std::memory_order_relaxed));
    host.evict(c, /*refused=*/true);
    return true;
  }

  // What the main region may hold when the device may hold `target`: what
  // the window does not.
  std::uint64_t main_capacity(std::uint64_t target) const { return target > window_bytes_ ? target - window_bytes_ : 0; }

  // Makes room for `c` (in no region), which costs `cost_ns` to build and
  // was used `uses` times, in a main region that may hold `capacity` and
  // holds `used`: evicts main-region entries, lowest priority first, until
  // c fits, if c's priority there would beat every one of them and none is
  // worth more than kAgingLimit times c or the newcomer being made room
  // for; otherwise evicts nothing and returns false. An entry of unknown
  // cost (0) beats everything but that bound. `dry_run`: only tells.
  bool take_room(const entry* c, double cost_ns, double uses, double worth_of_claimant, std::uint64_t capacity,
                 std::uint64_t used, policy_host& host, bool dry_run = false) {
    if (c->size_bytes > capacity) return false;
    const bool cost_known = cost_ns > 0;
    const double claim =
        inflation() + uses * cost_ns / static_cast<double>(std::max<std::uint64_t>(c->size_bytes, 1));
    const double bound = kAgingLimit * std::min(worth_of_claimant, newcomer_worth_);
    displaced_.clear();
    std::uint64_t freed = 0;
    bool admitted = true;
    while (used - freed + c->size_bytes > capacity) {
      double priority = 0;
      entry* v = main_.victim(priority_of, &priority);
      // A build in flight stays, and so does what is worth far more.
      if (!v || std::isinf(priority) || (cost_known && priority > claim) || worth(v) > bound) {
        admitted = false;
        break;
      }
      main_.erase(v);
      displaced_.emplace_back(v, priority);
      freed += v->size_bytes;
    }
    for (const auto& [v, priority] : displaced_) {
      if (admitted && !dry_run) {
        evict_from_main(v, priority, host);
      } else {
        main_.push(v, priority);
      }
    }
    return admitted;
  }

  // GreedyDual: everything left ages relative to what was just given up.
  // `v` was just taken out of the main region's queue.
  void evict_from_main(entry* v, double priority, policy_host& host) {
    v->region = outside;
    if (priority > inflation() && std::isfinite(priority)) {
      clock_.store(std::bit_cast<std::uint64_t>(priority), std::memory_order_relaxed);
    }
    remember(v->hash, static_cast<float>(v->history + uses_while_cached(v)), v->cost_ns.load(std::memory_order_relaxed));
    host.evict(v, /*refused=*/false);
  }

  // The memory of keys given up or turned away: how often each was used
  // and what it cost, so that a key that comes back is judged by its whole
  // history, not as new. `order_` lists (hash, serial) oldest first; a slot
  // whose serial is not its ghost's (the key was recalled, then remembered
  // again) is stale and forgets nothing when it expires.
  struct ghost {
    float uses = 0;
    float cost_ns = 0;
    std::uint64_t serial = 0;
    std::uint64_t when = 0;  // inserts_ when remembered
  };

  std::size_t ghost_limit() const { return kGhostsMin + kGhostsPerEntry * resident_; }

  void remember(std::uint64_t hash, float uses, float cost_ns) {
    auto [it, added] = ghosts_.try_emplace(hash);
    if (!added) {
      it->second.uses = uses;
      it->second.cost_ns = cost_ns;
      it->second.when = inserts_;
      return;
    }
    it->second = {uses, cost_ns, ++serial_, inserts_};
    order_.emplace_back(hash, serial_);
    while (order_.size() > ghost_limit()) {
      const auto [oldest, serial] = order_.front();
      order_.pop_front();
      if (const auto g = ghosts_.find(oldest); g != ghosts_.end() && g->second.serial == serial) ghosts_.erase(g);
    }
  }

  // A remembered key's uses, halved for every ghost_limit() insertions
  // since it was remembered (old popularity fades).
  double decayed(const ghost& g) const {
    const double periods = static_cast<double>(inserts_ - g.when) / static_cast<double>(ghost_limit());
    return g.uses * std::exp2(-periods);
  }

  // A new entry takes over its key's remembered uses.
  void recall(entry* e) {
    e->history = 0;
    const auto it = ghosts_.find(e->hash);
    if (it == ghosts_.end()) return;
    e->history = static_cast<float>(decayed(it->second));
    if (e->cost_ns.load(std::memory_order_relaxed) <= 0) e->cost_ns.store(it->second.cost_ns, std::memory_order_relaxed);
    ghosts_.erase(it);  // its slot in order_ is now stale
  }

  // The window, oldest first; a removed entry leaves a null slot until it
  // reaches the front. A window entry's heap_index is its slot's absolute
  // number; `window_base_` is the front's.
  std::deque<entry*> window_;
  std::uint32_t window_base_ = 0;
  std::uint64_t window_bytes_ = 0;
  std::uint64_t window_capacity_ = 0;
  eviction_queue main_;
  std::vector<std::pair<entry*, double>> displaced_;  // leave_window's scratch
  // What the newcomer of the make_room in progress is worth (worth_of_new);
  // infinite for a shrink.
  double newcomer_worth_ = std::numeric_limits<double>::infinity();
  std::size_t resident_ = 0;
  std::uint64_t inserts_ = 0;

  absl::flat_hash_map<std::uint64_t, ghost> ghosts_;
  std::deque<std::pair<std::uint64_t, std::uint64_t>> order_;
  std::uint64_t serial_ = 0;
};

}  // namespace

std::unique_ptr<cache_policy> make_cost_policy(std::atomic<std::uint64_t>& clock) {
  return std::make_unique<cost_policy>(clock);
}

}  // namespace unicache::detail
