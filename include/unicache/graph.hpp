// unicache/graph.hpp — the graph a frontend hands to unicache, and its
// partitions.
// For: users (frontends).
//
//   unicache::graph g;
//   auto x  = g.tensor({-1, 768});                                 // batch known at compile time
//   auto w1 = g.tensor({768, 3072}, tensor_property::constant);    // a weight
//   auto h  = g.tensor({-1, 3072});
//   g.add_op(op_kind::matmul, {x, w1}, {h});
//   ...
//   g.finalize();                                  // throws graph_error naming op and tensor
//   for (const partition& p : g.partitions()) compile(p, shapes, engine);
//
// Ops: MatMul (transpose flags; rank 2 or 3, a rank-3 pair is a batched
// MatMul), Add and Multiply (numpy broadcasting), ReLU, GELU (erf and tanh
// forms), Sigmoid, Tanh, Sqrt, Rsqrt, SiLU, Softmax (last axis), LayerNorm
// (last axis, with gamma and beta and an epsilon attribute), RMSNorm (last
// axis, with gamma and an epsilon attribute), Transpose (any permutation of up
// to 6 axes, each of 0..rank-1 once: output dim i is input dim
// permutation[i], as torch.permute with non-negative dims; the output is
// dense), Attention (scaled dot-product attention, below). Tensors are f32
// with shapes
// whose -1 dims are known only at compile time. The partitioner fuses
// MatMul -> (Add|Multiply)* -> eltwise* into one partition; every other op
// is a partition of its own.
//
// Attention reads {Q, K, V} or {Q, K, V, mask} and computes
// softmax(scale * Q K^T + mask, causal) V per batch and head, in f32 and
// without the scores in memory on a GPU. Layout bhld (the default, torch's
// scaled_dot_product_attention): Q [..., L, D], K [..., S, D], V [..., S, Dv]
// with equal leading dims (rank 3 or 4), output [..., L, Dv]. Layout blhd (a
// projection's output viewed per head, no copy): Q [B, L, H, D], K
// [B, S, H, D], V [B, S, H, Dv], output [B, L, H, Dv]. The mask is an
// additive f32 bias of rank at most the scores', that broadcasts (numpy
// rules) to the scores [..., L, S]
// (in either layout: [B, H, L, S] at rank 4). Causal: key j is hidden from
// query i where j > i (top-left aligned, as torch's is_causal). scale
// defaults to 1 / sqrt(D). A query row whose every score is -inf gives 0s
// (a plain softmax would give NaN).
//
// A graph has a JSON form (to_json, graph_from_json, at the end; the schema
// in docs/graph-json.md), so that a tool compiles it where it was not built.
//
// Thread safety: a graph is built by one thread; after finalize() it and its
// partitions are immutable and may be shared.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "unicache/error.hpp"

namespace unicache {

enum class data_type : std::uint8_t { f32 };
enum class tensor_property : std::uint8_t { variable, constant };

inline constexpr std::int64_t unknown_dim = -1;

struct logical_tensor {
  std::uint64_t id = 0;
  data_type dtype = data_type::f32;
  std::vector<std::int64_t> shape;  // -1: known at compile time
  tensor_property property = tensor_property::variable;

  bool is_constant() const { return property == tensor_property::constant; }
};

enum class op_kind : std::uint8_t {
  matmul,
  add,
  multiply,
  relu,
  gelu_erf,
  gelu_tanh,
  sigmoid,
  tanh,
  softmax,     // over the last axis
  layer_norm,  // over the last axis: (x - mean) / sqrt(var + epsilon) * gamma + beta
  transpose,   // permutes axes (the permutation attribute); writes a dense tensor
  sqrt,        // eltwise: sqrt(x)
  rsqrt,       // eltwise: 1 / sqrt(x)
  silu,        // eltwise: x * sigmoid(x) (SiLU, swish)
  rms_norm,    // over the last axis: x / sqrt(mean(x^2) + epsilon) * gamma
  attention,   // scaled dot-product attention: {Q, K, V} or {Q, K, V, mask}
};
const char* to_string(op_kind kind);
bool is_eltwise(op_kind kind);  // relu, gelu_*, sigmoid, tanh, sqrt, rsqrt, silu
bool is_binary(op_kind kind);   // add, multiply
// The per-channel parameters a row normalization reads after x: 2 for
// LayerNorm (gamma, beta), 1 for RMSNorm (gamma), 0 for every other op.
std::size_t normalization_parameters(op_kind kind);

// An op's attributes besides its kind, set with graph::set_attribute.
enum class op_attribute : std::uint8_t {
  epsilon,      // LayerNorm, RMSNorm: added to the variance (the mean square); finite, >= 0; default 1e-5
  permutation,  // Transpose: output dim i is input dim permutation[i]; required
  scale,        // Attention: multiplies Q K^T; finite and nonzero; default 1 / sqrt(head size)
  causal,       // Attention: one value, 0 or 1 (an integer list); default 0
  layout,       // Attention: one value (an integer list), an attention_layout; default bhld
};
// Attention's tensor layouts (op_attribute::layout).
enum class attention_layout : std::uint8_t {
  bhld = 0,  // Q [..., L, D]: heads before the sequence (torch's scaled_dot_product_attention)
  blhd = 1,  // Q [B, L, H, D]: the sequence before the heads (a projection viewed per head)
};
inline constexpr float kDefaultLayerNormEpsilon = 1e-5f;
// Transpose's largest rank.
inline constexpr std::size_t kMaxTransposeRank = 6;

struct op {
  std::uint64_t id = 0;
  op_kind kind = op_kind::relu;
  std::vector<std::uint64_t> inputs;   // logical tensor ids
  std::vector<std::uint64_t> outputs;
  bool transpose_a = false;  // matmul only
  bool transpose_b = false;
  float epsilon = kDefaultLayerNormEpsilon;  // layer_norm and rms_norm only
  std::vector<std::int64_t> permutation;     // transpose only
  float scale = 0.f;                         // attention only; 0: 1 / sqrt(head size)
  bool causal = false;                       // attention only
  attention_layout layout = attention_layout::bhld;  // attention only
};

// A malformed graph: the message names the op and the tensor.
class graph_error : public error {
 public:
  using error::error;
};

// A piece of the graph compiled as one unit.
class partition {
 public:
  enum class kind : std::uint8_t { fused_matmul, binary, eltwise, softmax, layer_norm, transpose, rms_norm, attention };

  kind pattern() const { return kind_; }
  // The partition's ops in execution order (copies of the graph's ops).
  const std::vector<op>& ops() const { return ops_; }
  // Tensors the partition reads from outside, in a stable order: the
  // matmul's A then B, then each post-op's extra operand in chain order.
  const std::vector<logical_tensor>& inputs() const { return inputs_; }
  const std::vector<logical_tensor>& outputs() const { return outputs_; }
  // 32 hex digits that identify the partition's structure (ops, attributes,
  // dtypes, shapes with -1, properties, connections; not tensor ids): equal
  // for the same graph built again, in any process.
  const std::string& fingerprint() const { return fingerprint_; }

 private:
  friend class graph;
  kind kind_ = kind::eltwise;
  std::vector<op> ops_;
  std::vector<logical_tensor> inputs_;
  std::vector<logical_tensor> outputs_;
  std::string fingerprint_;
};

class graph {
 public:
  // Declares a tensor and returns it (ids are assigned in order from 1).
  logical_tensor tensor(std::vector<std::int64_t> shape,
                        tensor_property property = tensor_property::variable,
                        data_type dtype = data_type::f32);
  // Adds an op reading `inputs` and writing `outputs` (tensors declared
  // with tensor()). Returns the op's id. LayerNorm reads {x, gamma, beta},
  // gamma and beta of shape [C] where C is x's last dimension; RMSNorm
  // reads {x, gamma}; Attention {Q, K, V} or {Q, K, V, mask}.
  std::uint64_t add_op(op_kind kind, const std::vector<logical_tensor>& inputs,
                       const std::vector<logical_tensor>& outputs, bool transpose_a = false,
                       bool transpose_b = false);
  // Declares that the caller reads tensor `t` itself (a frontend running
  // other ops on it between partitions): t is then some partition's output,
  // and no fused chain passes through it. Outputs no op reads need no mark.
  // Throws graph_error for an undeclared tensor.
  void mark_output(const logical_tensor& t);

  // Sets attribute `attribute` of op `op_id` (an id add_op returned).
  // Throws graph_error for an unknown op, an attribute the op's kind does
  // not have, or a value out of range (epsilon: not finite, or negative;
  // scale: not finite, or 0).
  void set_attribute(std::uint64_t op_id, op_attribute attribute, float value);
  // Sets an integer-list attribute (permutation: each of 0 .. rank-1 once,
  // checked against the input's rank by finalize(); causal and layout: one
  // value). Throws graph_error as the float form does, for a list longer
  // than kMaxTransposeRank, and for a causal other than {0} or {1} or a
  // layout that is not an attention_layout.
  void set_attribute(std::uint64_t op_id, op_attribute attribute, const std::vector<std::int64_t>& values);

  // Validates and partitions. Throws graph_error for: an op of an unknown
  // kind, an op reading a tensor nobody declared, a tensor written twice, a
  // cycle, a wrong number of inputs or outputs, and shapes that cannot agree
  // (matmul K, broadcasting, eltwise/softmax shape, output shape). Idempotent.
  void finalize();
  bool finalized() const { return finalized_; }

  // The partitions in execution order; every op is in exactly one. Requires
  // finalize().
  const std::vector<partition>& partitions() const;

  const std::vector<op>& ops() const { return ops_; }
  // Every declared tensor, in id order: tensors()[i].id == i + 1.
  const std::vector<logical_tensor>& tensors() const { return tensors_; }
  const logical_tensor& tensor_of(std::uint64_t id) const;
  // The ids given to mark_output, in the order given.
  const std::vector<std::uint64_t>& marked_outputs() const { return marked_outputs_; }

 private:
  std::vector<logical_tensor> tensors_;  // index = id - 1
  std::vector<op> ops_;
  std::vector<std::uint64_t> marked_outputs_;  // tensor ids, from mark_output
  std::vector<partition> partitions_;
  bool finalized_ = false;
};

// "[2,-1,768]": how error messages print a shape.
std::string shape_to_string(const std::vector<std::int64_t>& shape);

// Shape rules shared by validation and compilation. Each returns the output
// shape or throws graph_error naming `what`. Dims of -1 propagate.
std::vector<std::int64_t> matmul_output_shape(const std::vector<std::int64_t>& a,
                                              const std::vector<std::int64_t>& b,
                                              bool transpose_a, bool transpose_b,
                                              const std::string& what);
std::vector<std::int64_t> broadcast_shape(const std::vector<std::int64_t>& a,
                                          const std::vector<std::int64_t>& b,
                                          const std::string& what);
// Transpose's output: input dim permutation[i] at i. Throws graph_error for
// a permutation that is not one of the input's axes.
std::vector<std::int64_t> transpose_output_shape(const std::vector<std::int64_t>& in,
                                                 const std::vector<std::int64_t>& permutation,
                                                 const std::string& what);
// Attention's output from its inputs' shapes {Q, K, V} or {Q, K, V, mask}
// in `layout` (see the header's opening comment). Throws graph_error naming
// `what` for ranks or sizes that do not agree; dims of -1 agree with any.
std::vector<std::int64_t> attention_output_shape(const std::vector<const std::vector<std::int64_t>*>& in,
                                                 attention_layout layout, const std::string& what);
// `shape` with leading 1s up to `rank` (numpy broadcasting aligns trailing
// dims); a shape of that rank or more is returned as is.
std::vector<std::int64_t> to_rank(std::vector<std::int64_t> shape, std::size_t rank);

// --- The JSON form of a graph (docs/graph-json.md) ----------------------------
//
// A graph as text, so that a tool compiles it where it was not built (an
// ahead-of-time compile on a machine without the frontend, or without a GPU):
//
//   std::string text = unicache::to_json(g, {{{x.id, {8, 768}}}});  // one request: x is [8,768]
//   unicache::graph_document doc = unicache::graph_from_json(text);  // finalized
//   for (const auto& request : doc.requests) {
//     auto shapes = unicache::partition_input_shapes(doc.g, request);  // one list per partition
//     for (std::size_t i = 0; i < shapes.size(); ++i) compile(doc.g.partitions()[i], shapes[i], engine);
//   }
//
// Bounds of the reader (text from disk or the network is untrusted): the
// text, the number of tensors, ops, outputs and requests, and a shape's rank.
inline constexpr int kGraphJsonVersion = 1;
inline constexpr std::size_t kGraphJsonMaxBytes = std::size_t{64} << 20;
inline constexpr std::size_t kGraphJsonMaxItems = 1'000'000;
inline constexpr std::size_t kGraphJsonMaxRank = 8;

// Concrete shapes of a graph's inputs (the tensors no op writes), by tensor
// id, none with -1: the shapes one compile is for. An input whose declared
// shape has no -1 may be left out; every other input must be given.
using shape_request = std::map<std::uint64_t, std::vector<std::int64_t>>;

// What graph_from_json reads: the graph, finalized, and the document's
// requests (empty if it has none), each checked against the graph's inputs.
struct graph_document {
  graph g;
  std::vector<shape_request> requests;
};

// The graph as a JSON document of format version 1, with `requests` when
// there are any. `g` need not be finalized (graph_from_json finalizes what
// it reads). Throws graph_error for what the form cannot hold or the reader
// would refuse: a tensor of rank above kGraphJsonMaxRank, more than
// kGraphJsonMaxItems tensors or ops, a text above kGraphJsonMaxBytes,
// transpose flags on an op other than MatMul, an op of an unknown kind, and
// a request that does not fit the inputs (as partition_input_shapes says).
// Thread safety: reads `g` only; a finalized graph may be shared.
std::string to_json(const graph& g, const std::vector<shape_request>& requests = {});

// Reads a graph JSON document (any version-1 document, not only what
// to_json writes) and returns its graph, finalized, and its requests.
// `json` is untrusted: anything malformed, out of bounds or not a valid
// graph throws graph_error whose message starts "graph JSON: " and names
// the place: a byte offset for a syntax error ("at byte 1234: expected
// ','"), the value's path for the rest ("ops[3].inputs[1]: tensor 17 is not
// declared"), and "op 4 (MatMul)" (ops[3]) for what finalize() finds. Time
// and memory grow linearly with the text; the reader never recurses on it.
// graph_from_json(to_json(g)) has g's partitions, with equal fingerprints.
graph_document graph_from_json(std::string_view json);

// The concrete input shapes of every partition of `g` (finalized) for
// `request`, in partition order, each list in the partition's input order:
// what compile() takes. Shapes flow from the graph's inputs through each
// op with the rules above (matmul_output_shape, ...). Throws graph_error
// naming the tensor: a request naming a tensor that is not an input of g,
// an input left out that has -1 in its declared shape, a shape that does
// not fit the declared one, or shapes that do not agree through an op.
std::vector<std::vector<std::vector<std::int64_t>>> partition_input_shapes(const graph& g,
                                                                           const shape_request& request);

}  // namespace unicache
