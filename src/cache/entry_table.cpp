// The lock-free-read hash table of one device's entries.
#include "cache/entry_table.hpp"

#include <algorithm>
#include <bit>
#include <new>

#include "util/epoch.hpp"

namespace unicache::detail {
namespace {

// A slot holds an entry pointer with four bits of the entry's hash in its
// alignment bits (entries come from operator new: 16-byte aligned), so a
// probe rejects 15 of 16 foreign entries without touching their memory.
// 0 is an empty slot; kTombstone a removed one.
constexpr std::uintptr_t kTagMask = 0xf;
constexpr std::uintptr_t kTombstone = 1;  // tag 1 of the null pointer: never an entry
constexpr std::size_t kMinCapacity = 16;

static_assert(__STDCPP_DEFAULT_NEW_ALIGNMENT__ >= 16, "slot tags need 16-byte aligned entries");

std::uintptr_t tag_of(std::uint64_t hash) { return (hash >> 60) & kTagMask; }
std::uintptr_t tagged(const entry* e) { return reinterpret_cast<std::uintptr_t>(e) | tag_of(e->hash); }
entry* untagged(std::uintptr_t slot) { return reinterpret_cast<entry*>(slot & ~kTagMask); }
bool occupied(std::uintptr_t slot) { return slot != 0 && slot != kTombstone; }

// Grow (or clean) when entries plus tombstones would exceed 2/3 of the
// slots; rebuild to between 1/4 and 1/2 full.
bool needs_rebuild(std::size_t occupied_after, std::size_t capacity) {
  return 3 * occupied_after > 2 * capacity;
}
std::size_t rebuilt_capacity(std::size_t live_after) {
  return std::max(kMinCapacity, std::bit_ceil(2 * live_after));
}

}  // namespace

// A header followed by mask + 1 atomic slots, in one allocation.
struct entry_table::slot_array {
  std::size_t mask;

  std::atomic<std::uintptr_t>& operator[](std::size_t i) noexcept {
    return reinterpret_cast<std::atomic<std::uintptr_t>*>(this + 1)[i];
  }
  const std::atomic<std::uintptr_t>& operator[](std::size_t i) const noexcept {
    return reinterpret_cast<const std::atomic<std::uintptr_t>*>(this + 1)[i];
  }
  std::size_t bytes() const { return sizeof(slot_array) + (mask + 1) * sizeof(std::uintptr_t); }
  static slot_array* create(std::size_t capacity) {
    void* raw = ::operator new(sizeof(slot_array) + capacity * sizeof(std::atomic<std::uintptr_t>));
    auto* array = new (raw) slot_array{capacity - 1};
    for (std::size_t i = 0; i < capacity; ++i) new (&(*array)[i]) std::atomic<std::uintptr_t>(0);
    return array;
  }
  static void destroy(void* array) { ::operator delete(array); }
};

entry_table::entry_table() : slots_(slot_array::create(kMinCapacity)) {}

entry_table::~entry_table() { slot_array::destroy(slots_.load(std::memory_order_relaxed)); }

entry* entry_table::find(std::uint64_t hash, std::uint64_t context_id, owner_id owner,
                         std::string_view key) const noexcept {
  const slot_array* array = slots_.load(std::memory_order_acquire);
  const std::uintptr_t tag = tag_of(hash);
  for (std::size_t i = hash & array->mask;; i = (i + 1) & array->mask) {
    const std::uintptr_t slot = (*array)[i].load(std::memory_order_acquire);
    if (slot == 0) return nullptr;
    if ((slot & kTagMask) == tag && slot != kTombstone) {
      entry* e = untagged(slot);
      if (e->matches(hash, context_id, owner, key)) return e;
    }
  }
}

void entry_table::insert(entry* e) {
  slot_array* array = slots_.load(std::memory_order_relaxed);
  if (needs_rebuild(occupied_ + 1, array->mask + 1)) {
    rebuild(rebuilt_capacity(live_ + 1));
    array = slots_.load(std::memory_order_relaxed);
  }
  for (std::size_t i = e->hash & array->mask;; i = (i + 1) & array->mask) {
    const std::uintptr_t slot = (*array)[i].load(std::memory_order_relaxed);
    if (!occupied(slot)) {
      if (slot == 0) ++occupied_;
      (*array)[i].store(tagged(e), std::memory_order_release);
      ++live_;
      return;
    }
  }
}

void entry_table::erase(const entry* e) noexcept {
  slot_array* array = slots_.load(std::memory_order_relaxed);
  for (std::size_t i = e->hash & array->mask;; i = (i + 1) & array->mask) {
    const std::uintptr_t slot = (*array)[i].load(std::memory_order_relaxed);
    if (occupied(slot) && untagged(slot) == e) {
      (*array)[i].store(kTombstone, std::memory_order_release);
      --live_;
      return;
    }
    if (slot == 0) return;  // not present: callers guarantee it is
  }
}

std::vector<entry*> entry_table::entries() const {
  const slot_array* array = slots_.load(std::memory_order_relaxed);
  std::vector<entry*> out;
  out.reserve(live_);
  for (std::size_t i = 0; i <= array->mask; ++i) {
    const std::uintptr_t slot = (*array)[i].load(std::memory_order_relaxed);
    if (occupied(slot)) out.push_back(untagged(slot));
  }
  return out;
}

void entry_table::rebuild(std::size_t capacity) {
  slot_array* old_array = slots_.load(std::memory_order_relaxed);
  slot_array* array = slot_array::create(capacity);
  for (std::size_t i = 0; i <= old_array->mask; ++i) {
    const std::uintptr_t slot = (*old_array)[i].load(std::memory_order_relaxed);
    if (!occupied(slot)) continue;
    for (std::size_t j = untagged(slot)->hash & array->mask;; j = (j + 1) & array->mask) {
      if ((*array)[j].load(std::memory_order_relaxed) == 0) {
        (*array)[j].store(slot, std::memory_order_relaxed);
        break;
      }
    }
  }
  occupied_ = live_;
  slots_.store(array, std::memory_order_release);
  epoch_domain::instance().retire(old_array, &slot_array::destroy, old_array->bytes());
}

}  // namespace unicache::detail
