// The first pass of graph::finalize: every op is of a known kind, has its
// arity and reads and writes declared tensors, and every tensor has at most
// one writer.
#include <string>
#include <string_view>

#include "graph/passes.hpp"

namespace unicache::graph_passes {

producer_map validate(const std::vector<logical_tensor>& tensors, const std::vector<op>& ops) {
  // Arity, declared tensors, single producer.
  producer_map producer;  // tensor id -> op index
  for (std::size_t i = 0; i < ops.size(); ++i) {
    const op& o = ops[i];
    if (std::string_view(to_string(o.kind)) == "?") {
      throw graph_error("op " + std::to_string(o.id) + ": unknown op kind " + std::to_string(static_cast<int>(o.kind)));
    }
    if (o.kind == op_kind::attention) {
      if ((o.inputs.size() != 3 && o.inputs.size() != 4) || o.outputs.size() != 1) {
        throw graph_error(describe_op(o) + ": takes 3 or 4 inputs (Q, K, V, an optional mask) and 1 output, got " +
                          std::to_string(o.inputs.size()) + " and " + std::to_string(o.outputs.size()));
      }
    } else if (const std::size_t want_in = o.kind == op_kind::matmul || is_binary(o.kind)
                                               ? 2
                                               : 1 + normalization_parameters(o.kind);
               o.inputs.size() != want_in || o.outputs.size() != 1) {
      throw graph_error(describe_op(o) + ": takes " + std::to_string(want_in) + " input(s) and 1 output, got " +
                        std::to_string(o.inputs.size()) + " and " + std::to_string(o.outputs.size()));
    }
    for (std::uint64_t id : o.inputs) {
      if (id == 0 || id > tensors.size()) {
        throw graph_error(describe_op(o) + ": reads tensor " + std::to_string(id) + ", which was never declared");
      }
    }
    for (std::uint64_t id : o.outputs) {
      if (id == 0 || id > tensors.size()) {
        throw graph_error(describe_op(o) + ": writes tensor " + std::to_string(id) + ", which was never declared");
      }
      if (tensors[id - 1].is_constant()) {
        throw graph_error(describe_op(o) + ": writes tensor " + std::to_string(id) + ", which is constant");
      }
      auto [it, fresh] = producer.emplace(id, i);
      if (!fresh) {
        throw graph_error(describe_op(o) + ": writes tensor " + std::to_string(id) + ", which " +
                          describe_op(ops[it->second]) + " writes too");
      }
    }
  }
  return producer;
}

}  // namespace unicache::graph_passes
