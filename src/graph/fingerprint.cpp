// A partition's fingerprint: a hash of its structure that is the same for the
// same graph built again, in any process.
#include <bit>
#include <map>

#include "graph/passes.hpp"
#include "unicache/cache_key.hpp"
#include "util/stable_hash.hpp"

namespace unicache::graph_passes {

std::string fingerprint(const partition& p) {
  // Fingerprint: structure only, tensors by position, never by id.
  std::map<std::uint64_t, std::uint64_t> local;
  for (const auto& t : p.inputs()) local.emplace(t.id, local.size());
  for (const op& o : p.ops()) local.emplace(o.outputs[0], local.size());  // the tensors produced inside
  cache_key fp;
  fp.add("unicache-partition-v1").add(static_cast<std::uint8_t>(p.pattern()));
  for (const auto& t : p.inputs()) {
    fp.add(local[t.id]).add(static_cast<std::uint8_t>(t.dtype)).add(static_cast<std::uint8_t>(t.property));
    fp.add(static_cast<std::uint64_t>(t.shape.size()));
    for (std::int64_t d : t.shape) fp.add(d);
  }
  for (const op& o : p.ops()) {
    fp.add(static_cast<std::uint8_t>(o.kind)).add(o.transpose_a).add(o.transpose_b);
    if (normalization_parameters(o.kind) > 0) fp.add(std::bit_cast<std::uint32_t>(o.epsilon));
    if (o.kind == op_kind::transpose) {
      fp.add(static_cast<std::uint64_t>(o.permutation.size()));
      for (std::int64_t axis : o.permutation) fp.add(axis);
    }
    if (o.kind == op_kind::attention) {
      fp.add(std::bit_cast<std::uint32_t>(o.scale)).add(o.causal).add(static_cast<std::uint8_t>(o.layout));
    }
    for (std::uint64_t id : o.inputs) fp.add(local[id]);
    fp.add(local[o.outputs[0]]);
  }
  for (std::int64_t d : p.outputs()[0].shape) fp.add(d);
  return detail::to_hex(detail::stable_hash128(fp.bytes()));
}

}  // namespace unicache::graph_passes
