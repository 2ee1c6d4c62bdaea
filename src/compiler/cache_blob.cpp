// Compiled partitions' cache blobs: the blob of a compiled partition (its
// kernels' binaries under its device identity and blob key), its id, and
// compiling from one.
#include <cstdint>
#include <string>
#include <vector>

#include "compiler/compiled_partition_state.hpp"
#include "unicache/cache_key.hpp"
#include "unicache/store.hpp"

namespace unicache {
namespace detail {

std::string blob_key(const partition& p, const std::vector<std::vector<std::int64_t>>& input_shapes,
                     const engine& e) {
  cache_key key;
  key.add("compiled-partition/2").add(p.fingerprint()).add(e.get_backend()->name());
  key.add(e.get_backend()->kernel_configuration(p, input_shapes, e));
  return std::string(key.bytes());
}

namespace {

// A blob's payload: the kernels' binaries, each length-prefixed.
byte_vector encode_binaries(const std::vector<kernel_binary>& binaries) {
  cache_key out;
  out.add(static_cast<std::uint64_t>(binaries.size()));
  for (const kernel_binary& b : binaries) {
    out.add(b.key).add(std::string_view(reinterpret_cast<const char*>(b.binary.data()), b.binary.size()));
  }
  return byte_vector(out.bytes().begin(), out.bytes().end());
}

// The inverse of encode_binaries.
std::vector<kernel_binary> decode_binaries(const byte_vector& payload) {
  try {
    cache_key_reader in(std::string_view(reinterpret_cast<const char*>(payload.data()), payload.size()));
    const auto count = in.read<std::uint64_t>();
    std::vector<kernel_binary> out;
    for (std::uint64_t i = 0; i < count; ++i) {
      kernel_binary b;
      b.key = in.read_text();
      const std::string_view binary = in.read_text();
      b.binary.assign(binary.begin(), binary.end());
      out.push_back(std::move(b));
    }
    if (!in.done()) throw invalid_argument("trailing bytes");
    return out;
  } catch (const invalid_argument& err) {
    throw compile_error(std::string("compile_from_cache_blob: malformed blob payload (") + err.what() + ")");
  }
}

}  // namespace
}  // namespace detail

std::string compiled_partition::get_cache_blob_id() const {
  if (!state_) throw compile_error("get_cache_blob_id() of an empty compiled_partition");
  return blob_id(state_->identity, state_->blob_key);
}

std::vector<kernel_binary> compiled_partition::kernel_binaries() const {
  if (!state_) throw compile_error("kernel_binaries() of an empty compiled_partition");
  return state_->kernel->binaries();
}

byte_vector compiled_partition::get_cache_blob() const {
  if (!state_) throw compile_error("get_cache_blob() of an empty compiled_partition");
  return serialize_blob(state_->identity, state_->blob_key, detail::encode_binaries(state_->kernel->binaries()));
}

std::string get_cache_blob_id(const partition& p, const std::vector<std::vector<std::int64_t>>& input_shapes,
                              const engine& e) {
  detail::check_compilable("get_cache_blob_id", p, e);
  return detail::reporting_foreign(
      "get_cache_blob_id", [&] { return blob_id(e.get_backend()->identity(e), detail::blob_key(p, input_shapes, e)); });
}

compiled_partition compile_from_cache_blob(const partition& p,
                                           const std::vector<std::vector<std::int64_t>>& input_shapes,
                                           const engine& e, byte_span blob) {
  detail::check_compilable("compile_from_cache_blob", p, e);
  return detail::reporting_foreign("compile_from_cache_blob", [&] {
    blob_contents contents;
    try {
      contents = deserialize_blob(e.get_backend()->identity(e), blob);
    } catch (const store_error& err) {
      throw compile_error(std::string("compile_from_cache_blob: ") + err.what());
    }
    if (contents.key != detail::blob_key(p, input_shapes, e)) {
      throw compile_error(
          "compile_from_cache_blob: the blob belongs to another partition, backend or kernel configuration "
          "(partition " + p.fingerprint() + ")");
    }
    return compile_with(p, input_shapes, e, detail::decode_binaries(contents.binary));
  });
}

}  // namespace unicache
