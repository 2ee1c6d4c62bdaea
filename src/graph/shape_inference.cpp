// Shapes: the rules for an op's output shape (MatMul, broadcasting), and the
// pass of graph::finalize that infers each op's output with them.
#include <algorithm>
#include <string>

#include "graph/passes.hpp"

namespace unicache {
namespace {

// Two dims agree if equal or either is unknown.
bool agree(std::int64_t a, std::int64_t b) { return a == b || a == unknown_dim || b == unknown_dim; }

// LayerNorm's gamma and beta, RMSNorm's gamma: rank 1, as long as x's last dimension.
void check_layer_norm_parameters(const std::vector<logical_tensor>& tensors, const op& o, const std::string& what) {
  const std::int64_t channels = tensors[o.inputs[0] - 1].shape.back();
  for (std::size_t i = 1; i <= normalization_parameters(o.kind); ++i) {
    const logical_tensor& t = tensors[o.inputs[i] - 1];
    if (t.shape.size() != 1 || !agree(t.shape[0], channels)) {
      throw graph_error(what + ": " + (i == 1 ? "gamma" : "beta") + " (tensor " + std::to_string(t.id) +
                        ") has shape " + shape_to_string(t.shape) + ", but " + to_string(o.kind) + " over " +
                        shape_to_string(tensors[o.inputs[0] - 1].shape) + " needs [" + std::to_string(channels) +
                        "]");
    }
  }
}

}  // namespace

std::vector<std::int64_t> matmul_output_shape(const std::vector<std::int64_t>& a,
                                              const std::vector<std::int64_t>& b, bool ta, bool tb,
                                              const std::string& what) {
  if (a.size() < 2 || a.size() > 3 || b.size() < 2 || b.size() > 3) {
    throw graph_error(what + ": MatMul needs rank-2 or rank-3 inputs, got " + shape_to_string(a) + " and " +
                      shape_to_string(b));
  }
  const std::size_t ra = a.size(), rb = b.size();
  const std::int64_t m = ta ? a[ra - 1] : a[ra - 2];
  const std::int64_t ka = ta ? a[ra - 2] : a[ra - 1];
  const std::int64_t kb = tb ? b[rb - 1] : b[rb - 2];
  const std::int64_t n = tb ? b[rb - 2] : b[rb - 1];
  if (!agree(ka, kb)) {
    throw graph_error(what + ": MatMul inner dimensions differ: " + shape_to_string(a) + " x " + shape_to_string(b) +
                      (ta || tb ? " (with transposes)" : ""));
  }
  if (rb == 3 && ra == 2) {
    throw graph_error(what + ": MatMul with a rank-3 B needs a rank-3 A");
  }
  std::vector<std::int64_t> out;
  if (ra == 3) {
    if (rb == 3 && !agree(a[0], b[0]) && a[0] != 1 && b[0] != 1) {
      throw graph_error(what + ": MatMul batch dimensions differ: " + shape_to_string(a) + " x " + shape_to_string(b));
    }
    out.push_back(rb == 3 && b[0] != 1 ? (a[0] == unknown_dim ? b[0] : a[0]) : a[0]);
  }
  out.push_back(m);
  out.push_back(n);
  return out;
}

std::vector<std::int64_t> attention_output_shape(const std::vector<const std::vector<std::int64_t>*>& in,
                                                 attention_layout layout, const std::string& what) {
  const bool blhd = layout == attention_layout::blhd;
  const std::vector<std::int64_t>&q = *in[0], &k = *in[1], &v = *in[2];
  const std::size_t rank = q.size();
  auto fail = [&](const std::string& why) -> void {
    std::string shapes = "Q " + shape_to_string(q) + ", K " + shape_to_string(k) + ", V " + shape_to_string(v);
    if (in.size() > 3) shapes += ", mask " + shape_to_string(*in[3]);
    throw graph_error(what + ": Attention (" + (blhd ? "blhd" : "bhld") + ") " + why + ": " + shapes);
  };
  if ((blhd ? rank != 4 : rank < 3 || rank > 4) || k.size() != rank || v.size() != rank) {
    fail(blhd ? "needs rank-4 Q, K and V" : "needs Q, K and V of rank 3 or 4, all the same");
  }
  // Positions of the sequence and the head size; every other dim is a batch (or heads) dim.
  const std::size_t seq = blhd ? 1 : rank - 2, head = rank - 1;
  auto merge = [](std::int64_t a, std::int64_t b) { return a == unknown_dim ? b : a; };
  std::vector<std::int64_t> out = q;
  for (std::size_t d = 0; d < head; ++d) {
    if (d == seq) continue;
    if (!agree(q[d], k[d]) || !agree(q[d], v[d]) || !agree(k[d], v[d])) fail("batch or head dims differ");
    out[d] = merge(merge(q[d], k[d]), v[d]);
  }
  if (!agree(q[head], k[head])) fail("Q and K have different head sizes");
  if (!agree(k[seq], v[seq])) fail("K and V have different lengths");
  out[head] = v[head];
  if (in.size() > 3) {
    // The scores: [..., L, S] in bhld order, whatever the layout.
    std::vector<std::int64_t> scores;
    if (blhd) {
      scores = {out[0], out[2], q[1], merge(k[1], v[1])};
    } else {
      scores.assign(out.begin(), out.end() - 2);
      scores.push_back(q[seq]);
      scores.push_back(merge(k[seq], v[seq]));
    }
    const std::vector<std::int64_t>& mask = *in[3];
    bool fits = mask.size() <= scores.size();
    for (std::size_t i = 0; fits && i < mask.size(); ++i) {
      const std::int64_t want = scores[scores.size() - mask.size() + i];
      fits = mask[i] == 1 || agree(mask[i], want);
    }
    if (!fits) fail("mask does not broadcast to the scores " + shape_to_string(scores));
  }
  return out;
}

std::vector<std::int64_t> transpose_output_shape(const std::vector<std::int64_t>& in,
                                                 const std::vector<std::int64_t>& permutation,
                                                 const std::string& what) {
  std::vector<bool> seen(in.size(), false);
  bool valid = permutation.size() == in.size() && !in.empty() && in.size() <= kMaxTransposeRank;
  std::vector<std::int64_t> out;
  for (std::size_t i = 0; valid && i < permutation.size(); ++i) {
    const std::int64_t axis = permutation[i];
    valid = axis >= 0 && static_cast<std::size_t>(axis) < in.size() && !seen[static_cast<std::size_t>(axis)];
    if (valid) {
      seen[static_cast<std::size_t>(axis)] = true;
      out.push_back(in[static_cast<std::size_t>(axis)]);
    }
  }
  if (!valid) {
    throw graph_error(what + ": permutation " + shape_to_string(permutation) + " is not one of the axes of " +
                      shape_to_string(in) + " (each of 0.." + std::to_string(static_cast<std::int64_t>(in.size()) - 1) +
                      " once; rank 1 to " + std::to_string(kMaxTransposeRank) + ")");
  }
  return out;
}

std::vector<std::int64_t> to_rank(std::vector<std::int64_t> shape, std::size_t rank) {
  if (shape.size() < rank) shape.insert(shape.begin(), rank - shape.size(), 1);
  return shape;
}

std::vector<std::int64_t> broadcast_shape(const std::vector<std::int64_t>& a,
                                          const std::vector<std::int64_t>& b, const std::string& what) {
  const std::size_t rank = std::max(a.size(), b.size());
  std::vector<std::int64_t> out(rank);
  for (std::size_t i = 0; i < rank; ++i) {
    const std::int64_t da = i < rank - a.size() ? 1 : a[i - (rank - a.size())];
    const std::int64_t db = i < rank - b.size() ? 1 : b[i - (rank - b.size())];
    if (da == db) {
      out[i] = da;
    } else if (da == 1) {
      out[i] = db;
    } else if (db == 1) {
      out[i] = da;
    } else if (da == unknown_dim || db == unknown_dim) {
      out[i] = da == unknown_dim ? db : da;
    } else {
      throw graph_error(what + ": shapes " + shape_to_string(a) + " and " + shape_to_string(b) + " do not broadcast");
    }
  }
  return out;
}

namespace graph_passes {

void infer_shapes(const std::vector<logical_tensor>& tensors, const std::vector<op>& ops,
                  const std::vector<std::size_t>& order) {
  // Shapes and dtypes.
  for (std::size_t i : order) {
    const op& o = ops[i];
    const std::string what = describe_op(o);
    for (std::uint64_t id : o.inputs) {
      if (tensors[id - 1].dtype != data_type::f32) {
        throw graph_error(what + ": tensor " + std::to_string(id) + " is not f32");
      }
    }
    const auto& in0 = tensors[o.inputs[0] - 1].shape;
    std::vector<std::int64_t> expect;
    if (o.kind == op_kind::matmul) {
      expect = matmul_output_shape(in0, tensors[o.inputs[1] - 1].shape, o.transpose_a, o.transpose_b, what);
    } else if (is_binary(o.kind)) {
      expect = broadcast_shape(in0, tensors[o.inputs[1] - 1].shape, what);
    } else if (o.kind == op_kind::transpose) {
      expect = transpose_output_shape(in0, o.permutation, what);
    } else if (o.kind == op_kind::attention) {
      std::vector<const std::vector<std::int64_t>*> shapes;
      for (std::uint64_t id : o.inputs) shapes.push_back(&tensors[id - 1].shape);
      expect = attention_output_shape(shapes, o.layout, what);
    } else {
      expect = in0;
      if ((o.kind == op_kind::softmax || normalization_parameters(o.kind) > 0) && in0.empty()) {
        throw graph_error(what + ": " + to_string(o.kind) + " needs rank >= 1");
      }
      if (normalization_parameters(o.kind) > 0) check_layer_norm_parameters(tensors, o, what);
    }
    const logical_tensor& out = tensors[o.outputs[0] - 1];
    bool fits = out.shape.size() == expect.size();
    for (std::size_t d = 0; fits && d < expect.size(); ++d) fits = agree(out.shape[d], expect[d]);
    if (!fits) {
      throw graph_error(what + ": output tensor " + std::to_string(out.id) + " has shape " +
                        shape_to_string(out.shape) + ", but the op produces " + shape_to_string(expect));
    }
  }
}

}  // namespace graph_passes
}  // namespace unicache
