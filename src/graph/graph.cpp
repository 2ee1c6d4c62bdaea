// The graph as a frontend builds it (tensors, ops), the names messages give
// ops and shapes, and finalize(), which runs the passes of passes.hpp in order.
#include "unicache/graph.hpp"

#include <cmath>
#include <string>
#include <utility>

#include "graph/passes.hpp"

namespace unicache {

std::string shape_to_string(const std::vector<std::int64_t>& shape) {
  std::string out = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) out += (i ? "," : "") + std::to_string(shape[i]);
  return out + "]";
}

const char* to_string(op_kind kind) {
  switch (kind) {
    case op_kind::matmul: return "MatMul";
    case op_kind::add: return "Add";
    case op_kind::multiply: return "Multiply";
    case op_kind::relu: return "ReLU";
    case op_kind::gelu_erf: return "GELU(erf)";
    case op_kind::gelu_tanh: return "GELU(tanh)";
    case op_kind::sigmoid: return "Sigmoid";
    case op_kind::tanh: return "Tanh";
    case op_kind::softmax: return "Softmax";
    case op_kind::layer_norm: return "LayerNorm";
    case op_kind::transpose: return "Transpose";
    case op_kind::sqrt: return "Sqrt";
    case op_kind::rsqrt: return "Rsqrt";
    case op_kind::silu: return "SiLU";
    case op_kind::rms_norm: return "RMSNorm";
    case op_kind::attention: return "Attention";
  }
  return "?";
}

bool is_eltwise(op_kind k) {
  return k == op_kind::relu || k == op_kind::gelu_erf || k == op_kind::gelu_tanh || k == op_kind::sigmoid ||
         k == op_kind::tanh || k == op_kind::sqrt || k == op_kind::rsqrt || k == op_kind::silu;
}
bool is_binary(op_kind k) { return k == op_kind::add || k == op_kind::multiply; }
std::size_t normalization_parameters(op_kind k) {
  return k == op_kind::layer_norm ? 2 : k == op_kind::rms_norm ? 1 : 0;
}

logical_tensor graph::tensor(std::vector<std::int64_t> shape, tensor_property property, data_type dtype) {
  for (std::int64_t d : shape) {
    if (d < unknown_dim || d == 0) {
      throw graph_error("tensor " + std::to_string(tensors_.size() + 1) + ": bad dimension " +
                        std::to_string(d) + " in " + shape_to_string(shape) + " (positive, or -1 for unknown)");
    }
  }
  logical_tensor t{tensors_.size() + 1, dtype, std::move(shape), property};
  tensors_.push_back(t);
  finalized_ = false;
  return t;
}

std::uint64_t graph::add_op(op_kind kind, const std::vector<logical_tensor>& inputs,
                            const std::vector<logical_tensor>& outputs, bool transpose_a, bool transpose_b) {
  op o;
  o.id = ops_.size() + 1;
  o.kind = kind;
  for (const auto& t : inputs) o.inputs.push_back(t.id);
  for (const auto& t : outputs) o.outputs.push_back(t.id);
  o.transpose_a = transpose_a;
  o.transpose_b = transpose_b;
  ops_.push_back(std::move(o));
  finalized_ = false;
  return ops_.back().id;
}

void graph::mark_output(const logical_tensor& t) {
  tensor_of(t.id);  // declared, or graph_error
  marked_outputs_.push_back(t.id);
  finalized_ = false;
}

void graph::set_attribute(std::uint64_t op_id, op_attribute attribute, float value) {
  if (op_id == 0 || op_id > ops_.size()) throw graph_error("op " + std::to_string(op_id) + " does not exist");
  op& o = ops_[op_id - 1];
  const std::string what = graph_passes::describe_op(o);
  if (attribute == op_attribute::scale) {
    if (o.kind != op_kind::attention) throw graph_error(what + ": has no scale (Attention has)");
    if (!std::isfinite(value) || value == 0.f) {
      throw graph_error(what + ": scale " + std::to_string(value) +
                        " is not a finite nonzero value (leave it unset for 1 / sqrt(head size))");
    }
    o.scale = value;
    finalized_ = false;
    return;
  }
  if (attribute != op_attribute::epsilon) {
    throw graph_error(what + ": unknown float attribute " + std::to_string(static_cast<int>(attribute)));
  }
  if (normalization_parameters(o.kind) == 0) throw graph_error(what + ": has no epsilon (LayerNorm and RMSNorm have)");
  if (!std::isfinite(value) || value < 0.f) {
    throw graph_error(what + ": epsilon " + std::to_string(value) + " is not a finite value >= 0");
  }
  o.epsilon = value;
  finalized_ = false;
}

void graph::set_attribute(std::uint64_t op_id, op_attribute attribute, const std::vector<std::int64_t>& values) {
  if (op_id == 0 || op_id > ops_.size()) throw graph_error("op " + std::to_string(op_id) + " does not exist");
  op& o = ops_[op_id - 1];
  const std::string what = graph_passes::describe_op(o);
  if (attribute == op_attribute::causal || attribute == op_attribute::layout) {
    const bool causal = attribute == op_attribute::causal;
    const char* name = causal ? "causal" : "layout";
    if (o.kind != op_kind::attention) throw graph_error(what + ": has no " + name + " (Attention has)");
    if (values.size() != 1 || values[0] < 0 || values[0] > 1) {
      throw graph_error(what + ": " + name + " takes one value, " +
                        (causal ? "0 or 1" : "0 (bhld) or 1 (blhd)") + ", got " + shape_to_string(values));
    }
    if (causal) {
      o.causal = values[0] == 1;
    } else {
      o.layout = static_cast<attention_layout>(values[0]);
    }
    finalized_ = false;
    return;
  }
  if (attribute != op_attribute::permutation) {
    throw graph_error(what + ": unknown integer-list attribute " + std::to_string(static_cast<int>(attribute)));
  }
  if (o.kind != op_kind::transpose) throw graph_error(what + ": has no permutation (Transpose has)");
  if (values.size() > kMaxTransposeRank) {
    throw graph_error(what + ": a permutation of " + std::to_string(values.size()) + " axes (at most " +
                      std::to_string(kMaxTransposeRank) + ")");
  }
  o.permutation = values;
  finalized_ = false;
}

const logical_tensor& graph::tensor_of(std::uint64_t id) const {
  if (id == 0 || id > tensors_.size()) throw graph_error("tensor " + std::to_string(id) + " is not declared");
  return tensors_[id - 1];
}

const std::vector<partition>& graph::partitions() const {
  if (!finalized_) throw graph_error("partitions() needs finalize() first");
  return partitions_;
}

void graph::finalize() {
  if (finalized_) return;
  partitions_.clear();
  const graph_passes::producer_map producer = graph_passes::validate(tensors_, ops_);
  const std::vector<std::size_t> order = graph_passes::topological_order(ops_, producer);
  graph_passes::infer_shapes(tensors_, ops_, order);
  for (graph_passes::partition_parts& parts : graph_passes::fuse_partitions(tensors_, ops_, order, producer, marked_outputs_)) {
    partition p;
    p.kind_ = parts.kind;
    p.ops_ = std::move(parts.ops);
    p.inputs_ = std::move(parts.inputs);
    p.outputs_ = std::move(parts.outputs);
    p.fingerprint_ = graph_passes::fingerprint(p);
    partitions_.push_back(std::move(p));
  }
  finalized_ = true;
}

}  // namespace unicache
