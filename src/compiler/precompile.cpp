// Ahead of time: every partition of a graph compiled for its requests on an
// engine (an offline one, usually), and each kernel's binary put in the
// store under the engine's identity. The engine's scope is evicted from the
// kernel cache at the end.
#include <set>
#include <string>

#include "unicache/cache.hpp"
#include "unicache/compiler.hpp"
#include "unicache/store.hpp"

namespace unicache {
namespace {

// Sizes for the -1 dims of a graph without requests: one row, where a
// generic GEMM shares K out, and many, where it does not.
constexpr std::int64_t kFewRows = 1, kManyRows = 4096;

// Every input with each -1 as `size` (inputs without one are left out).
shape_request every_unknown_as(const graph& g, std::int64_t size) {
  std::set<std::uint64_t> written;
  for (const op& o : g.ops()) written.insert(o.outputs.begin(), o.outputs.end());
  shape_request request;
  for (const logical_tensor& t : g.tensors()) {
    if (written.count(t.id)) continue;
    std::vector<std::int64_t> shape = t.shape;
    bool unknown = false;
    for (std::int64_t& d : shape) {
      if (d == unknown_dim) {
        d = size;
        unknown = true;
      }
    }
    if (unknown) request.emplace(t.id, std::move(shape));
  }
  return request;
}

}  // namespace

precompile_report precompile(const graph& g, const std::vector<shape_request>& requests, const engine& e) {
  if (!g.finalized()) throw graph_error("precompile: the graph is not finalized");
  kernel_store& store = kernel_store::instance();
  if (!store.enabled()) throw store_error("precompile: the persistent store is off (UNICACHE_PERSISTENT_CACHE_DIR)");
  const std::vector<shape_request> wanted =
      requests.empty() ? std::vector<shape_request>{every_unknown_as(g, kFewRows), every_unknown_as(g, kManyRows)}
                       : requests;
  const device_identity identity = e.get_backend()->identity(e);
  precompile_report report;
  std::set<std::string> seen;
  for (const shape_request& request : wanted) {
    const std::vector<std::vector<std::vector<std::int64_t>>> shapes = partition_input_shapes(g, request);
    for (std::size_t i = 0; i < shapes.size(); ++i) {
      // Each kernel is built once in the engine's scope and found in the
      // kernel cache after (an engine that compiles ahead of time builds
      // the GEMM variant the shapes ask for, never a stand-in).
      const compiled_partition cp = compile(g.partitions()[i], shapes[i], e);
      ++report.compiles;
      for (const kernel_binary& k : cp.kernel_binaries()) {
        if (k.binary.empty() || !seen.insert(k.key).second) continue;
        ++report.kernels;
        const std::optional<byte_vector> before = store.get(identity, k.key);
        if (before == k.binary) {
          ++report.already_stored;
          continue;
        }
        // Another binary under the key (another build of the same source):
        // this compiler's replaces it.
        if (before) store.remove(identity, k.key);
        if (store.put(identity, k.key, k.binary)) {
          ++report.stored;
        } else {
          throw store_error("precompile: the store did not take a binary of partition " + std::to_string(i) +
                            " (" + std::to_string(k.binary.size()) + " bytes; see its warning above)");
        }
      }
    }
  }
  kernel_cache().evict_scope(e.scope());
  return report;
}

}  // namespace unicache
