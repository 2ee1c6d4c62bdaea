// Shape requests (graph.hpp, shape_request): checking one against a graph's
// inputs, which the JSON writer and reader and partition_input_shapes share.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "unicache/graph.hpp"

namespace unicache::graph_passes {

// Checks requests against one graph: made once per graph, so that checking
// many requests costs each request's size, not the graph's.
class request_checker {
 public:
  explicit request_checker(const graph& g);

  // Throws graph_error "<where>: tensor N ..." for a tensor that is not an
  // input of the graph (undeclared, or written by an op), a shape that does
  // not fit the declared one (rank, a fixed dim, a dim below 1), and an
  // input with -1 in its declared shape that the request leaves out.
  void check(const shape_request& request, const std::string& where) const;

 private:
  const graph& g_;
  std::vector<std::uint64_t> writer_;         // tensor index -> id of the op writing it; 0: an input
  std::vector<std::uint64_t> unknown_inputs_;  // inputs with a -1 in their declared shape
};

}  // namespace unicache::graph_passes
