// The order graph::finalize visits ops in: each after the ops whose outputs
// it reads (Kahn's algorithm), which also finds cycles.
#include <functional>
#include <queue>
#include <string>

#include "graph/passes.hpp"

namespace unicache::graph_passes {

std::vector<std::size_t> topological_order(const std::vector<op>& ops, const producer_map& producer) {
  // Topological order (Kahn); what is left over is a cycle.
  std::vector<std::size_t> indegree(ops.size(), 0);
  std::vector<std::vector<std::size_t>> consumers(ops.size());
  for (std::size_t i = 0; i < ops.size(); ++i) {
    for (std::uint64_t id : ops[i].inputs) {
      if (auto it = producer.find(id); it != producer.end()) {
        ++indegree[i];
        consumers[it->second].push_back(i);
      }
    }
  }
  std::vector<std::size_t> order;
  std::priority_queue<std::size_t, std::vector<std::size_t>, std::greater<>> ready;  // stable: by op index
  for (std::size_t i = 0; i < ops.size(); ++i) {
    if (indegree[i] == 0) ready.push(i);
  }
  while (!ready.empty()) {
    const std::size_t i = ready.top();
    ready.pop();
    order.push_back(i);
    for (std::size_t c : consumers[i]) {
      if (--indegree[c] == 0) ready.push(c);
    }
  }
  if (order.size() != ops.size()) {
    for (std::size_t i = 0; i < ops.size(); ++i) {
      if (indegree[i] > 0) {
        throw graph_error(describe_op(ops[i]) + ": is part of a cycle (reads tensor " +
                          std::to_string(ops[i].inputs[0]) + " which depends on its own output)");
      }
    }
  }
  return order;
}

}  // namespace unicache::graph_passes
