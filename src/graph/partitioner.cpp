// The partitioner: fuses MatMul -> (Add|Multiply)* -> eltwise* chains into one
// partition each, every other op a partition of its own, in an order that runs.
#include <algorithm>
#include <functional>
#include <queue>
#include <set>
#include <unordered_map>
#include <unordered_set>

#include "graph/passes.hpp"

namespace unicache::graph_passes {
namespace {

using op_groups = std::vector<std::vector<std::size_t>>;  // op indices, one list per partition
using readers_map = std::unordered_map<std::uint64_t, std::vector<std::size_t>>;  // tensor -> ops reading it
constexpr std::size_t kCaller = static_cast<std::size_t>(-1);  // a reader that is not an op: the caller

// Grows a MatMul's group (group.front()) along its chain of post-ops: the
// next op must be the only reader of the last one's output, which the
// caller does not read (read_outside), and binary ops come before eltwise
// ones.
void fuse_chain(const std::vector<op>& ops, readers_map& readers, std::vector<int>& owner,
                std::vector<std::size_t>& group) {
  const std::size_t i = group.front();
  bool seen_eltwise = false;
  std::size_t last = i;
  for (;;) {
    const std::uint64_t out = ops[last].outputs[0];
    const auto& r = readers[out];
    if (r.size() != 1 || r[0] == kCaller || owner[r[0]] >= 0) break;  // used elsewhere too: a boundary
    const op& next = ops[r[0]];
    const bool binary = is_binary(next.kind), eltwise = is_eltwise(next.kind);
    if (!(eltwise || (binary && !seen_eltwise))) break;
    if (binary && next.inputs[0] == out && next.inputs[1] == out) break;  // x + x
    seen_eltwise = seen_eltwise || eltwise;
    group.push_back(r[0]);
    owner[r[0]] = owner[i];
    last = r[0];
  }
}

// The ops grouped into partitions, each group's ops in execution order;
// owner[i] is op i's group.
op_groups group_ops(const std::vector<op>& ops, const std::vector<std::size_t>& order,
                    const std::vector<std::uint64_t>& read_outside, std::vector<int>& owner) {
  // Partitioning: MatMul -> (Add|Multiply)* -> eltwise* fused; others alone.
  // The caller counts as one more reader of a tensor it reads itself.
  readers_map readers;
  for (std::size_t i = 0; i < ops.size(); ++i) {
    for (std::uint64_t id : ops[i].inputs) readers[id].push_back(i);
  }
  for (std::uint64_t id : read_outside) readers[id].push_back(kCaller);
  owner.assign(ops.size(), -1);
  op_groups groups;
  for (std::size_t i : order) {
    if (owner[i] >= 0) continue;
    std::vector<std::size_t> group{i};
    owner[i] = static_cast<int>(groups.size());
    if (ops[i].kind == op_kind::matmul) fuse_chain(ops, readers, owner, group);
    groups.push_back(std::move(group));
  }
  return groups;
}

// The groups' indices in an order that runs: Kahn's algorithm over the
// groups, the lowest-numbered ready group first (so the order is stable and
// follows the op order where dependencies allow).
std::vector<std::size_t> group_order(const op_groups& groups, const std::vector<int>& owner,
                                     const std::vector<op>& ops, const producer_map& producer) {
  // Order partitions topologically (a fused chain may read a tensor that a
  // later op in the op order produces).
  std::vector<std::vector<std::size_t>> dependents(groups.size());
  std::vector<std::size_t> waiting(groups.size(), 0);  // groups not yet ordered that each one reads from
  for (std::size_t g = 0; g < groups.size(); ++g) {
    std::set<int> deps;
    for (std::size_t i : groups[g]) {
      for (std::uint64_t id : ops[i].inputs) {
        if (auto it = producer.find(id); it != producer.end() && owner[it->second] != static_cast<int>(g)) {
          deps.insert(owner[it->second]);
        }
      }
    }
    for (int d : deps) dependents[static_cast<std::size_t>(d)].push_back(g);
    waiting[g] = deps.size();
  }
  std::priority_queue<std::size_t, std::vector<std::size_t>, std::greater<>> ready;
  for (std::size_t g = 0; g < groups.size(); ++g) {
    if (waiting[g] == 0) ready.push(g);
  }
  std::vector<std::size_t> order;
  while (!ready.empty()) {
    const std::size_t g = ready.top();
    ready.pop();
    order.push_back(g);
    for (std::size_t d : dependents[g]) {
      if (--waiting[d] == 0) ready.push(d);
    }
  }
  return order;
}

// A group's ops with the tensors it reads from outside and writes.
partition_parts assemble(const std::vector<std::size_t>& group, const std::vector<logical_tensor>& tensors,
                         const std::vector<op>& ops) {
  partition_parts p;
  std::unordered_set<std::uint64_t> internal;  // tensors produced inside
  for (std::size_t i : group) {
    p.ops.push_back(ops[i]);
    internal.insert(ops[i].outputs[0]);
  }
  auto inside = [&](std::uint64_t id) { return internal.count(id) != 0; };
  for (const op& o : p.ops) {
    for (std::uint64_t id : o.inputs) {
      if (!inside(id)) p.inputs.push_back(tensors[id - 1]);
    }
  }
  p.outputs.push_back(tensors[p.ops.back().outputs[0] - 1]);
  const op_kind first = p.ops.front().kind;
  p.kind = first == op_kind::matmul ? partition::kind::fused_matmul
           : is_binary(first)       ? partition::kind::binary
           : first == op_kind::softmax    ? partition::kind::softmax
           : first == op_kind::layer_norm ? partition::kind::layer_norm
           : first == op_kind::rms_norm   ? partition::kind::rms_norm
           : first == op_kind::transpose  ? partition::kind::transpose
           : first == op_kind::attention  ? partition::kind::attention
                                          : partition::kind::eltwise;
  return p;
}

}  // namespace

std::vector<partition_parts> fuse_partitions(const std::vector<logical_tensor>& tensors, const std::vector<op>& ops,
                                             const std::vector<std::size_t>& order, const producer_map& producer,
                                             const std::vector<std::uint64_t>& read_outside) {
  std::vector<int> owner;
  const op_groups groups = group_ops(ops, order, read_outside, owner);
  std::vector<partition_parts> out;
  for (std::size_t g : group_order(groups, owner, ops, producer)) out.push_back(assemble(groups[g], tensors, ops));
  return out;
}

}  // namespace unicache::graph_passes
