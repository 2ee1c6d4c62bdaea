// Fingerprints of constant tensors' contents: where the sampled blocks lie,
// and the XXH3 hashes of the whole tensor and of the samples.
#include <algorithm>

#include "unicache/constant_registry.hpp"

#define XXH_INLINE_ALL
#include <xxhash.h>

namespace unicache {

sample_layout sample_layout_for(std::size_t bytes) noexcept {
  constexpr std::size_t kBlocks = 16, kBlockBytes = 64;
  if (bytes <= kBlocks * kBlockBytes) return {0, bytes, bytes, bytes == 0 ? 0 : std::size_t{1}};
  // One block at the start of each sixteenth. The rectangle the blocks span
  // (count x stride bytes) stays inside the tensor: OpenCL drivers check a
  // strided read's whole extent against the buffer, not only its last block.
  return {0, kBlockBytes, bytes / kBlocks, kBlocks};
}

content_fingerprint fingerprint_of(const void* data, std::size_t bytes) noexcept {
  const XXH128_hash_t h = XXH3_128bits(data, bytes);
  return {h.high64, h.low64};
}

std::uint64_t sample_hash(const void* samples, std::size_t bytes) noexcept { return XXH3_64bits(samples, bytes); }

std::uint64_t host_sample_hash(const void* data, std::size_t bytes) noexcept {
  const sample_layout s = sample_layout_for(bytes);
  XXH3_state_t state;
  XXH3_64bits_reset(&state);
  const auto* base = static_cast<const unsigned char*>(data);
  for (std::size_t i = 0; i < s.count; ++i) XXH3_64bits_update(&state, base + s.first + i * s.stride, s.block);
  return XXH3_64bits_digest(&state);
}

}  // namespace unicache
