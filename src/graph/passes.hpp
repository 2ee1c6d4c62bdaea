// The passes of graph::finalize, in the order it runs them: validate,
// topological_order, infer_shapes, fuse_partitions, then a fingerprint per
// partition. Each throws graph_error naming the op (and tensor) at fault.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "unicache/graph.hpp"

namespace unicache::graph_passes {

// Which op writes each tensor: tensor id -> index into the graph's ops.
using producer_map = std::unordered_map<std::uint64_t, std::size_t>;

// "op 3 (MatMul)": how error messages name an op.
inline std::string describe_op(const op& o) {
  return "op " + std::to_string(o.id) + " (" + to_string(o.kind) + ")";
}

// Arity, declared tensors, single producer, no constant written. Returns the
// producer of every tensor an op writes.
producer_map validate(const std::vector<logical_tensor>& tensors, const std::vector<op>& ops);

// The ops' indices in a topological order (Kahn's algorithm, ties broken by
// op index so the order is stable). Throws for an op that is part of a cycle.
std::vector<std::size_t> topological_order(const std::vector<op>& ops, const producer_map& producer);

// Each op's output shape inferred from its inputs and checked against the
// declared output; every input must be f32. Ops are visited in `order`, so
// an error names the first op at fault in execution order.
void infer_shapes(const std::vector<logical_tensor>& tensors, const std::vector<op>& ops,
                  const std::vector<std::size_t>& order);

// One partition as the partitioner forms it; graph::finalize turns it into a
// partition (whose fields only the graph may set).
struct partition_parts {
  partition::kind kind = partition::kind::eltwise;
  std::vector<op> ops;                   // in execution order
  std::vector<logical_tensor> inputs;    // read from outside, in the order the ops read them
  std::vector<logical_tensor> outputs;
};

// MatMul -> (Add|Multiply)* -> eltwise* fused into one partition, every other
// op a partition of its own; the partitions in an order that runs. A chain
// ends at a tensor in `read_outside` (graph::mark_output).
std::vector<partition_parts> fuse_partitions(const std::vector<logical_tensor>& tensors, const std::vector<op>& ops,
                                             const std::vector<std::size_t>& order, const producer_map& producer,
                                             const std::vector<std::uint64_t>& read_outside);

// The partition's fingerprint (see partition::fingerprint).
std::string fingerprint(const partition& p);

}  // namespace unicache::graph_passes
