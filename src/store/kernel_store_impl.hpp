// The inside of kernel_store, shared by the files that hold its methods,
// one concept each: its operations (kernel_store.cpp), its maintenance
// (store_maintenance.cpp), bundles out and in (bundle_export.cpp,
// bundle_import.cpp), and misses explained and recorded
// (miss_explanation.cpp, miss_records.cpp).
//
// Settings can change at run time while other threads get and put: each
// operation takes the current store_state once, at its start, and works
// with it to its end. A change builds a new state and swaps it in; the old
// one goes when the last operation using it finishes.
#pragma once

#include <array>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "unicache/storage_tier.hpp"
#include "store/tier_registry.hpp"
#include "store/store_directory.hpp"
#include "store/store_testing.hpp"
#include "unicache/store.hpp"
#include "util/mutex.hpp"

namespace unicache {

namespace detail {

struct store_state {
  store_config config;
  std::shared_ptr<store_directory> directory;  // null: the store is off or unusable
};

}  // namespace detail

struct kernel_store::impl {
  std::shared_ptr<const detail::store_state> state() const {
    detail::mutex_lock l(&state_mu);
    return state_;
  }
  // The state of a maintenance operation; throws store_error when off.
  std::shared_ptr<const detail::store_state> require_enabled() const;

  // Applies `change` to the current settings and swaps in the new state.
  template <typename Change>
  void update(Change change) {
    detail::mutex_lock l(&settings_mu);
    const std::shared_ptr<const detail::store_state> current = state();
    store_config config = current ? current->config : store_config{};
    change(config);
    configure(std::move(config), current.get());
  }

  detail::store_testing::key_hasher hasher = &detail::key_hash;

  // The local store's get, put and remove: the first tier of kernel_store's chain.
  std::optional<byte_vector> get_local(const device_identity& device, std::string_view key) noexcept;
  bool put_local(const device_identity& device, std::string_view key, byte_span binary) noexcept;
  bool remove_local(const device_identity& device, std::string_view key) noexcept;

  // The local store as a storage tier.
  class local_tier final : public storage_tier {
   public:
    explicit local_tier(impl& store) : store_(store) {}
    const char* name() const override { return "local"; }
    tier_result get(const device_identity& device, std::string_view key) noexcept override {
      std::optional<byte_vector> b = store_.get_local(device, key);
      return {b ? tier_status::hit : tier_status::miss, std::move(b)};
    }
    tier_result put(const device_identity& device, std::string_view key, byte_span binary) noexcept override {
      return {store_.put_local(device, key, binary) ? tier_status::done : tier_status::skipped, {}};
    }
    tier_result remove(const device_identity& device, std::string_view key) noexcept override {
      return {store_.remove_local(device, key) ? tier_status::done : tier_status::skipped, {}};
    }

   private:
    impl& store_;
  };
  local_tier local{*this};

  // The chain for one operation: the local tier, then the remote ones.
  struct chain {
    std::shared_ptr<const detail::tier_list> remotes;  // keeps the remote tiers alive meanwhile
    storage_tier* local = nullptr;
    std::size_t size() const { return 1 + (remotes ? remotes->size() : 0); }
    storage_tier* operator[](std::size_t i) const { return i == 0 ? local : (*remotes)[i - 1].get(); }
    // The tier that grants build leases: the nearest remote one.
    storage_tier* leases() const { return remotes && !remotes->empty() ? remotes->front().get() : nullptr; }
  };
  chain tiers() { return {remote(), &local}; }

  // Build leases this process holds (get_or_lease), by device hash and
  // key: put and release_lease end them through the tier that granted them.
  struct held_lease {
    std::shared_ptr<storage_tier> tier;
    std::string token;
  };
  void hold_lease(std::string id, held_lease lease) {
    {
      detail::mutex_lock l(&leases_mu);
      std::swap(leases_[std::move(id)], lease);
    }
    // `lease` now holds what was there (another owner's lease on the same
    // key, expired and granted again): its tier goes outside the lock.
  }
  std::optional<held_lease> take_lease(const std::string& id) {
    detail::mutex_lock l(&leases_mu);
    const auto it = leases_.find(id);
    if (it == leases_.end()) return std::nullopt;
    held_lease out = std::move(it->second);
    leases_.erase(it);
    return out;
  }

  // The remote tiers behind the local store (whatever their kinds:
  // tier_registry.hpp), nearest first, or null.
  std::shared_ptr<const detail::tier_list> remote() const {
    detail::mutex_lock l(&state_mu);
    return remote_;
  }
  // The old tiers are destroyed after the lock is released (each drains
  // its queue, bounded), or by the last operation still using them.
  void set_remote(detail::tier_list tiers) {
    std::shared_ptr<const detail::tier_list> r =
        tiers.empty() ? nullptr : std::make_shared<const detail::tier_list>(std::move(tiers));
    detail::mutex_lock l(&state_mu);
    std::swap(remote_, r);
  }

 private:
  // Opens the directory unless `current` already has it open, then swaps.
  void configure(store_config config, const detail::store_state* current) ABSL_EXCLUSIVE_LOCKS_REQUIRED(settings_mu);

  detail::mutex settings_mu;  // one change at a time; opening a directory never holds up readers
  mutable detail::mutex leases_mu;
  std::map<std::string, held_lease> leases_ ABSL_GUARDED_BY(leases_mu);
  mutable detail::mutex state_mu;
  std::shared_ptr<const detail::store_state> state_ ABSL_GUARDED_BY(state_mu);
  std::shared_ptr<const detail::tier_list> remote_ ABSL_GUARDED_BY(state_mu);
};

}  // namespace unicache
