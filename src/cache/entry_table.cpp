#include "cache/entry_table.hpp"

#include <algorithm>
#include <bit>
#include <new>

#include "util/epoch.hpp"

namespace unicache::detail {
namespace {

entry* const kTombstone = reinterpret_cast<entry*>(std::uintptr_t{1});
constexpr std::size_t kMinCapacity = 16;

}  // namespace

// A header followed by mask + 1 atomic slots, in one allocation.
struct entry_table::slot_array {
  std::size_t mask;

  std::atomic<entry*>& operator[](std::size_t i) noexcept {
    return reinterpret_cast<std::atomic<entry*>*>(this + 1)[i];
  }
  const std::atomic<entry*>& operator[](std::size_t i) const noexcept {
    return reinterpret_cast<const std::atomic<entry*>*>(this + 1)[i];
  }
  static slot_array* create(std::size_t capacity) {
    void* raw = ::operator new(sizeof(slot_array) + capacity * sizeof(std::atomic<entry*>));
    auto* array = new (raw) slot_array{capacity - 1};
    for (std::size_t i = 0; i < capacity; ++i) new (&(*array)[i]) std::atomic<entry*>(nullptr);
    return array;
  }
  static void destroy(void* array) { ::operator delete(array); }
};

entry_table::entry_table() : slots_(slot_array::create(kMinCapacity)) {}

entry_table::~entry_table() { slot_array::destroy(slots_.load(std::memory_order_relaxed)); }

entry* entry_table::find(std::uint64_t hash, std::uint64_t context_id, backend_id backend,
                         std::string_view key) const noexcept {
  const slot_array* array = slots_.load(std::memory_order_acquire);
  for (std::size_t i = hash & array->mask;; i = (i + 1) & array->mask) {
    entry* e = (*array)[i].load(std::memory_order_acquire);
    if (e == nullptr) return nullptr;
    if (e != kTombstone && e->matches(hash, context_id, backend, key)) return e;
  }
}

void entry_table::insert(entry* e) {
  slot_array* array = slots_.load(std::memory_order_relaxed);
  if (2 * (occupied_ + 1) > array->mask + 1) {
    rebuild(std::max(kMinCapacity, std::bit_ceil(4 * (live_ + 1))));
    array = slots_.load(std::memory_order_relaxed);
  }
  for (std::size_t i = e->hash & array->mask;; i = (i + 1) & array->mask) {
    entry* current = (*array)[i].load(std::memory_order_relaxed);
    if (current == nullptr || current == kTombstone) {
      if (current == nullptr) ++occupied_;
      (*array)[i].store(e, std::memory_order_release);
      ++live_;
      return;
    }
  }
}

void entry_table::erase(const entry* e) noexcept {
  slot_array* array = slots_.load(std::memory_order_relaxed);
  for (std::size_t i = e->hash & array->mask;; i = (i + 1) & array->mask) {
    entry* current = (*array)[i].load(std::memory_order_relaxed);
    if (current == e) {
      (*array)[i].store(kTombstone, std::memory_order_release);
      --live_;
      return;
    }
    if (current == nullptr) return;  // not present: callers guarantee it is
  }
}

std::vector<entry*> entry_table::entries() const {
  const slot_array* array = slots_.load(std::memory_order_relaxed);
  std::vector<entry*> out;
  out.reserve(live_);
  for (std::size_t i = 0; i <= array->mask; ++i) {
    entry* e = (*array)[i].load(std::memory_order_relaxed);
    if (e != nullptr && e != kTombstone) out.push_back(e);
  }
  return out;
}

void entry_table::rebuild(std::size_t capacity) {
  slot_array* old_array = slots_.load(std::memory_order_relaxed);
  slot_array* array = slot_array::create(capacity);
  for (std::size_t i = 0; i <= old_array->mask; ++i) {
    entry* e = (*old_array)[i].load(std::memory_order_relaxed);
    if (e == nullptr || e == kTombstone) continue;
    for (std::size_t j = e->hash & array->mask;; j = (j + 1) & array->mask) {
      if ((*array)[j].load(std::memory_order_relaxed) == nullptr) {
        (*array)[j].store(e, std::memory_order_relaxed);
        break;
      }
    }
  }
  occupied_ = live_;
  slots_.store(array, std::memory_order_release);
  epoch_domain::instance().retire(old_array, &slot_array::destroy,
                                  (old_array->mask + 1) * sizeof(std::atomic<entry*>));
}

}  // namespace unicache::detail
