// Tuning a GEMM's shape class: the tiles worth timing, the device memory
// timing them takes, and the choice as the persistent store keeps it.
#include <algorithm>
#include <bit>
#include <optional>
#include <string>

#include "unicache/cache_key.hpp"
#include "unicache/kernel_generator.hpp"
#include "unicache/store.hpp"

namespace unicache::gpu::kernels {

std::string to_string(const gemm_tiles& t) {
  return std::to_string(t.bm) + "x" + std::to_string(t.bn) + "x" + std::to_string(t.bk) + "/" + std::to_string(t.rm) +
         "x" + std::to_string(t.rn) + (t.split_k > 1 ? "/split" + std::to_string(t.split_k) : "");
}

std::vector<gemm_tiles> gemm_candidates(const gemm_problem& g, const gemm_tiles& generic) {
  // bm, bn, bk, rm, rn; work-items (bn/rn) x (bm/rm). Few rows: narrow tiles
  // so that the device has blocks to run; many: larger register blocks.
  static const gemm_tiles small_m[] = {{16, 64, 16, 4, 4}, {32, 64, 16, 4, 4}, {32, 64, 16, 4, 8}, {32, 128, 16, 4, 8}};
  static const gemm_tiles medium_m[] = {{32, 64, 16, 4, 8}, {64, 64, 16, 4, 4}, {64, 64, 16, 8, 8},
                                        {32, 128, 16, 4, 8}, {64, 128, 16, 8, 8}};
  static const gemm_tiles large_m[] = {{64, 64, 16, 8, 8}, {64, 128, 16, 8, 8}, {128, 64, 16, 8, 8}, {128, 128, 8, 8, 8}};
  std::vector<gemm_tiles> out;
  auto add = [&](const gemm_tiles& t) {
    if (std::find(out.begin(), out.end(), t) == out.end()) out.push_back(t);
  };
  // The bounds are powers of two: every M of a class (a power-of-two range)
  // gets the same candidates, so a stored choice is one of them.
  if (g.m < 32) {
    for (const gemm_tiles& t : small_m) add(t);
  } else if (g.m < 512) {
    for (const gemm_tiles& t : medium_m) add(t);
  } else {
    for (const gemm_tiles& t : large_m) add(t);
  }
  // K shared out: narrow tiles for few rows and a long K, and the generic
  // tiles for any rows (as gemm_splits may choose them).
  if (g.batch == 1) {
    for (int split : {2, 4, 8}) {
      if (g.m >= 256 || g.k < 1024 || g.k / split < 256) break;
      gemm_tiles t = g.m < 32 ? gemm_tiles{16, 64, 16, 4, 4} : gemm_tiles{32, 64, 16, 4, 8};
      t.split_k = split;
      add(t);
    }
  }
  gemm_tiles plain = generic;
  plain.split_k = 1;
  add(plain);
  // Not for a class whose workspace would pass 64 MiB at its largest M
  // (gemm_splits gives such shapes no split, and timing it would count
  // against the tuning's memory).
  const auto class_top = static_cast<std::size_t>(std::bit_ceil(static_cast<unsigned long>(g.m) + 1));
  if (g.batch == 1 && g.k >= 512 &&
      kGenericSplitK * class_top * static_cast<std::size_t>(g.n) * sizeof(float) <= kMaxSplitWorkspaceBytes) {
    gemm_tiles t = plain;
    t.split_k = kGenericSplitK;
    add(t);
  }
  return out;
}

std::optional<gemm_tiles> stored_tiles(std::string_view backend, const device_identity& device, const gemm_problem& g,
                                       const std::vector<gemm_tiles>& candidates) {
  const std::optional<byte_vector> stored = kernel_store::instance().get(device, gemm_tuning_key(backend, g));
  if (!stored) return std::nullopt;
  return decode_tiles(*stored, candidates);
}

std::size_t gemm_scratch_b_floats(const gemm_problem& g, const std::vector<gemm_tiles>& candidates) {
  std::size_t b = static_cast<std::size_t>(g.k * g.n);
  for (const gemm_tiles& t : candidates) b = std::max(b, round_up(g.k, t.bk) * round_up(g.n, t.bn));
  return b;
}

std::size_t gemm_tuning_bytes(const gemm_problem& g, const std::vector<gemm_tiles>& candidates) {
  std::size_t floats = static_cast<std::size_t>(g.m * g.k) + gemm_scratch_b_floats(g, candidates) +
                       static_cast<std::size_t>(g.m * g.n);
  floats += g.posts.size() * static_cast<std::size_t>(g.m * g.n);  // at most C's size each
  int split = 1;
  for (const gemm_tiles& t : candidates) split = std::max(split, t.split_k);
  if (split > 1) floats += static_cast<std::size_t>(split) * static_cast<std::size_t>(g.m * g.n);
  return floats * sizeof(float);
}

std::string gemm_tuning_key(std::string_view backend, const gemm_problem& g) {
  cache_key key;
  // /2: the kernels changed (split-K for the generic tiles, new stores):
  // choices timed with the earlier ones are tuned again.
  key.add("gemm-tuning/2").add(backend).add(gemm_shape_class(g).key);
  return std::string(key.bytes());
}

byte_vector encode_tiles(const gemm_tiles& t) {
  cache_key out;
  out.add("tiles/2").add(t.bm).add(t.bn).add(t.bk).add(t.rm).add(t.rn).add(t.split_k);
  return byte_vector(out.bytes().begin(), out.bytes().end());
}

std::optional<gemm_tiles> decode_tiles(byte_span stored, const std::vector<gemm_tiles>& allowed) {
  for (const gemm_tiles& t : allowed) {
    const byte_vector want = encode_tiles(t);
    if (stored.size() == want.size() && std::equal(want.begin(), want.end(), stored.begin())) return t;
  }
  return std::nullopt;
}

}  // namespace unicache::gpu::kernels
