// bench_store's eviction mode (store_eviction.cpp).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace unicache::bench {

// Fills a store under `root` with each of `sizes` entries in turn, triggers
// eviction while a second process gets and puts, and prints a table row per
// size. Returns 0, or 1 if the second process read a wrong binary.
int run_eviction(const std::string& root, const std::vector<std::uint64_t>& sizes);

}  // namespace unicache::bench
