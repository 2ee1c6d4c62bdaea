// Shape requests: checked against a graph's inputs, and carried through its
// partitions to the concrete input shapes of each (partition_input_shapes).
#include "graph/shape_requests.hpp"

#include <algorithm>
#include <unordered_map>

#include "graph/passes.hpp"

namespace unicache {
namespace graph_passes {

request_checker::request_checker(const graph& g) : g_(g), writer_(g.tensors().size(), 0) {
  for (const op& o : g.ops()) {
    for (std::uint64_t id : o.outputs) {
      if (id >= 1 && id <= writer_.size() && writer_[id - 1] == 0) writer_[id - 1] = o.id;
    }
  }
  for (const logical_tensor& t : g.tensors()) {
    const bool unknown = std::find(t.shape.begin(), t.shape.end(), unknown_dim) != t.shape.end();
    if (unknown && writer_[t.id - 1] == 0) unknown_inputs_.push_back(t.id);
  }
}

void request_checker::check(const shape_request& request, const std::string& where) const {
  for (const auto& [id, shape] : request) {
    const std::string tensor = where + ": tensor " + std::to_string(id);
    if (id == 0 || id > writer_.size()) throw graph_error(tensor + " is not declared");
    if (writer_[id - 1] != 0) {
      throw graph_error(tensor + " is written by " + describe_op(g_.ops()[writer_[id - 1] - 1]) +
                        ": a request gives shapes of the graph's inputs only");
    }
    const std::vector<std::int64_t>& declared = g_.tensors()[id - 1].shape;
    bool fits = shape.size() == declared.size();
    for (std::size_t d = 0; fits && d < shape.size(); ++d) {
      fits = shape[d] >= 1 && (declared[d] == unknown_dim || declared[d] == shape[d]);
    }
    if (!fits) {
      throw graph_error(tensor + ": " + shape_to_string(shape) + " does not fit its declared shape " +
                        shape_to_string(declared) + " (same rank, each -1 a size >= 1, the other dims as declared)");
    }
  }
  for (std::uint64_t id : unknown_inputs_) {
    if (request.find(id) == request.end()) {
      throw graph_error(where + ": tensor " + std::to_string(id) + ", an input declared " +
                        shape_to_string(g_.tensors()[id - 1].shape) + ", has no shape in the request");
    }
  }
}

namespace {

using shape = std::vector<std::int64_t>;

// An op's output shape from its inputs' concrete shapes, by the rules
// finalize() and compile() apply, checked against the declared output.
shape concrete_output(const graph& g, const op& o, const std::vector<const shape*>& in) {
  std::string what = "request: " + describe_op(o) + " reading tensor";
  for (std::size_t i = 0; i < o.inputs.size(); ++i) what += (i ? ", " : " ") + std::to_string(o.inputs[i]);
  shape out;
  if (o.kind == op_kind::matmul) {
    out = matmul_output_shape(*in[0], *in[1], o.transpose_a, o.transpose_b, what);
  } else if (is_binary(o.kind)) {
    out = broadcast_shape(*in[0], *in[1], what);
  } else if (o.kind == op_kind::transpose) {
    out = transpose_output_shape(*in[0], o.permutation, what);
  } else if (o.kind == op_kind::attention) {
    out = attention_output_shape(in, o.layout, what);
  } else {
    out = *in[0];
  }
  if (normalization_parameters(o.kind) > 0) {
    for (std::size_t k = 1; k <= normalization_parameters(o.kind); ++k) {
      if (out.empty() || *in[k] != shape{out.back()}) {
        throw graph_error(what + ": " + (k == 1 ? "gamma " : "beta ") + shape_to_string(*in[k]) +
                          " for rows of " + shape_to_string(out));
      }
    }
  }
  const logical_tensor& declared = g.tensor_of(o.outputs[0]);
  bool fits = out.size() == declared.shape.size();
  for (std::size_t d = 0; fits && d < out.size(); ++d) {
    fits = declared.shape[d] == unknown_dim || declared.shape[d] == out[d];
  }
  if (!fits) {
    throw graph_error(what + ": output tensor " + std::to_string(declared.id) + " would be " +
                      shape_to_string(out) + ", but it is declared " + shape_to_string(declared.shape));
  }
  return out;
}

}  // namespace
}  // namespace graph_passes

std::vector<std::vector<std::vector<std::int64_t>>> partition_input_shapes(const graph& g,
                                                                           const shape_request& request) {
  using graph_passes::shape;
  const std::vector<partition>& parts = g.partitions();  // graph_error unless finalized
  graph_passes::request_checker(g).check(request, "request");
  // Every tensor's concrete shape once known: the request's, a declared
  // shape without -1, or an op's output.
  std::unordered_map<std::uint64_t, shape> known(request.begin(), request.end());
  auto shape_of = [&](std::uint64_t id, std::size_t reader) -> const shape& {
    if (auto it = known.find(id); it != known.end()) return it->second;
    const logical_tensor& t = g.tensor_of(id);
    if (std::find(t.shape.begin(), t.shape.end(), unknown_dim) != t.shape.end()) {
      throw graph_error("request: tensor " + std::to_string(id) + " (declared " + shape_to_string(t.shape) +
                        "), read by partition " + std::to_string(reader) + ", has no concrete shape");
    }
    return known.emplace(id, t.shape).first->second;  // node-based: references stay valid
  };
  std::vector<std::vector<shape>> out;
  out.reserve(parts.size());
  for (std::size_t p = 0; p < parts.size(); ++p) {
    std::vector<shape> inputs;
    for (const logical_tensor& t : parts[p].inputs()) inputs.push_back(shape_of(t.id, p));
    out.push_back(std::move(inputs));
    for (const op& o : parts[p].ops()) {
      std::vector<const shape*> in;
      for (std::uint64_t id : o.inputs) in.push_back(&shape_of(id, p));
      shape result = graph_passes::concrete_output(g, o, in);
      known.insert_or_assign(o.outputs[0], std::move(result));
    }
  }
  return out;
}

}  // namespace unicache
