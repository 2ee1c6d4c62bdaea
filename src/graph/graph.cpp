#include "unicache/graph.hpp"

#include <algorithm>
#include <map>
#include <queue>
#include <set>
#include <unordered_map>

#include "unicache/cache_key.hpp"

#include "util/stable_hash.hpp"

namespace unicache {
namespace {

std::string describe_op(const op& o) {
  return "op " + std::to_string(o.id) + " (" + to_string(o.kind) + ")";
}

// Two dims agree if equal or either is unknown.
bool agree(std::int64_t a, std::int64_t b) { return a == b || a == unknown_dim || b == unknown_dim; }

}  // namespace

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
  }
  return "?";
}

bool is_eltwise(op_kind k) {
  return k == op_kind::relu || k == op_kind::gelu_erf || k == op_kind::gelu_tanh ||
         k == op_kind::sigmoid || k == op_kind::tanh;
}
bool is_binary(op_kind k) { return k == op_kind::add || k == op_kind::multiply; }

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
  // Arity, declared tensors, single producer.
  std::unordered_map<std::uint64_t, std::size_t> producer;  // tensor id -> op index
  for (std::size_t i = 0; i < ops_.size(); ++i) {
    const op& o = ops_[i];
    const std::size_t want_in = o.kind == op_kind::matmul || is_binary(o.kind) ? 2 : 1;
    if (o.inputs.size() != want_in || o.outputs.size() != 1) {
      throw graph_error(describe_op(o) + ": takes " + std::to_string(want_in) + " input(s) and 1 output, got " +
                        std::to_string(o.inputs.size()) + " and " + std::to_string(o.outputs.size()));
    }
    for (std::uint64_t id : o.inputs) {
      if (id == 0 || id > tensors_.size()) {
        throw graph_error(describe_op(o) + ": reads tensor " + std::to_string(id) + ", which was never declared");
      }
    }
    for (std::uint64_t id : o.outputs) {
      if (id == 0 || id > tensors_.size()) {
        throw graph_error(describe_op(o) + ": writes tensor " + std::to_string(id) + ", which was never declared");
      }
      if (tensors_[id - 1].is_constant()) {
        throw graph_error(describe_op(o) + ": writes tensor " + std::to_string(id) + ", which is constant");
      }
      auto [it, fresh] = producer.emplace(id, i);
      if (!fresh) {
        throw graph_error(describe_op(o) + ": writes tensor " + std::to_string(id) + ", which " +
                          describe_op(ops_[it->second]) + " writes too");
      }
    }
  }
  // Topological order (Kahn); what is left over is a cycle.
  std::vector<std::size_t> indegree(ops_.size(), 0);
  std::vector<std::vector<std::size_t>> consumers(ops_.size());
  for (std::size_t i = 0; i < ops_.size(); ++i) {
    for (std::uint64_t id : ops_[i].inputs) {
      if (auto it = producer.find(id); it != producer.end()) {
        ++indegree[i];
        consumers[it->second].push_back(i);
      }
    }
  }
  std::vector<std::size_t> order;
  std::priority_queue<std::size_t, std::vector<std::size_t>, std::greater<>> ready;  // stable: by op index
  for (std::size_t i = 0; i < ops_.size(); ++i) {
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
  if (order.size() != ops_.size()) {
    for (std::size_t i = 0; i < ops_.size(); ++i) {
      if (indegree[i] > 0) {
        throw graph_error(describe_op(ops_[i]) + ": is part of a cycle (reads tensor " +
                          std::to_string(ops_[i].inputs[0]) + " which depends on its own output)");
      }
    }
  }
  // Shapes and dtypes.
  for (std::size_t i : order) {
    const op& o = ops_[i];
    const std::string what = describe_op(o);
    for (std::uint64_t id : o.inputs) {
      if (tensors_[id - 1].dtype != data_type::f32) {
        throw graph_error(what + ": tensor " + std::to_string(id) + " is not f32");
      }
    }
    const auto& in0 = tensors_[o.inputs[0] - 1].shape;
    std::vector<std::int64_t> expect;
    if (o.kind == op_kind::matmul) {
      expect = matmul_output_shape(in0, tensors_[o.inputs[1] - 1].shape, o.transpose_a, o.transpose_b, what);
    } else if (is_binary(o.kind)) {
      expect = broadcast_shape(in0, tensors_[o.inputs[1] - 1].shape, what);
    } else {
      expect = in0;
      if (o.kind == op_kind::softmax && in0.empty()) throw graph_error(what + ": Softmax needs rank >= 1");
    }
    const logical_tensor& out = tensors_[o.outputs[0] - 1];
    bool fits = out.shape.size() == expect.size();
    for (std::size_t d = 0; fits && d < expect.size(); ++d) fits = agree(out.shape[d], expect[d]);
    if (!fits) {
      throw graph_error(what + ": output tensor " + std::to_string(out.id) + " has shape " +
                        shape_to_string(out.shape) + ", but the op produces " + shape_to_string(expect));
    }
  }

  // Partitioning: MatMul -> (Add|Multiply)* -> eltwise* fused; others alone.
  std::unordered_map<std::uint64_t, std::vector<std::size_t>> readers;  // tensor -> ops reading it
  for (std::size_t i = 0; i < ops_.size(); ++i) {
    for (std::uint64_t id : ops_[i].inputs) readers[id].push_back(i);
  }
  std::vector<int> owner(ops_.size(), -1);
  std::vector<std::vector<std::size_t>> groups;
  for (std::size_t i : order) {
    if (owner[i] >= 0) continue;
    std::vector<std::size_t> group{i};
    owner[i] = static_cast<int>(groups.size());
    if (ops_[i].kind == op_kind::matmul) {
      bool seen_eltwise = false;
      std::size_t last = i;
      for (;;) {
        const std::uint64_t out = ops_[last].outputs[0];
        const auto& r = readers[out];
        if (r.size() != 1 || owner[r[0]] >= 0) break;  // used elsewhere too: a boundary
        const op& next = ops_[r[0]];
        const bool binary = is_binary(next.kind), eltwise = is_eltwise(next.kind);
        if (!(eltwise || (binary && !seen_eltwise))) break;
        if (binary && next.inputs[0] == out && next.inputs[1] == out) break;  // x + x
        seen_eltwise = seen_eltwise || eltwise;
        group.push_back(r[0]);
        owner[r[0]] = owner[i];
        last = r[0];
      }
    }
    groups.push_back(std::move(group));
  }
  // Order partitions topologically (a fused chain may read a tensor that a
  // later op in the op order produces).
  std::vector<std::set<int>> deps(groups.size());
  for (std::size_t g = 0; g < groups.size(); ++g) {
    for (std::size_t i : groups[g]) {
      for (std::uint64_t id : ops_[i].inputs) {
        if (auto it = producer.find(id); it != producer.end() && owner[it->second] != static_cast<int>(g)) {
          deps[g].insert(owner[it->second]);
        }
      }
    }
  }
  std::vector<int> done(groups.size(), 0);
  std::vector<std::size_t> group_order;
  while (group_order.size() < groups.size()) {
    for (std::size_t g = 0; g < groups.size(); ++g) {
      if (done[g]) continue;
      if (std::all_of(deps[g].begin(), deps[g].end(), [&](int d) { return done[d] != 0; })) {
        done[g] = 1;
        group_order.push_back(g);
        break;
      }
    }
  }

  for (std::size_t g : group_order) {
    partition p;
    std::vector<std::uint64_t> internal;  // tensors produced inside
    for (std::size_t i : groups[g]) {
      p.ops_.push_back(ops_[i]);
      internal.push_back(ops_[i].outputs[0]);
    }
    auto inside = [&](std::uint64_t id) {
      return std::find(internal.begin(), internal.end(), id) != internal.end();
    };
    for (const op& o : p.ops_) {
      for (std::uint64_t id : o.inputs) {
        if (!inside(id)) p.inputs_.push_back(tensors_[id - 1]);
      }
    }
    p.outputs_.push_back(tensors_[p.ops_.back().outputs[0] - 1]);
    const op_kind first = p.ops_.front().kind;
    p.kind_ = first == op_kind::matmul ? partition::kind::fused_matmul
              : is_binary(first)       ? partition::kind::binary
              : first == op_kind::softmax ? partition::kind::softmax
                                          : partition::kind::eltwise;
    // Fingerprint: structure only, tensors by position, never by id.
    std::map<std::uint64_t, std::uint64_t> local;
    for (const auto& t : p.inputs_) local.emplace(t.id, local.size());
    for (std::uint64_t id : internal) local.emplace(id, local.size());
    cache_key fp;
    fp.add("unicache-partition-v1").add(static_cast<std::uint8_t>(p.kind_));
    for (const auto& t : p.inputs_) {
      fp.add(local[t.id]).add(static_cast<std::uint8_t>(t.dtype)).add(static_cast<std::uint8_t>(t.property));
      fp.add(static_cast<std::uint64_t>(t.shape.size()));
      for (std::int64_t d : t.shape) fp.add(d);
    }
    for (const op& o : p.ops_) {
      fp.add(static_cast<std::uint8_t>(o.kind)).add(o.transpose_a).add(o.transpose_b);
      for (std::uint64_t id : o.inputs) fp.add(local[id]);
      fp.add(local[o.outputs[0]]);
    }
    for (std::int64_t d : p.outputs_[0].shape) fp.add(d);
    p.fingerprint_ = detail::to_hex(detail::stable_hash128(fp.bytes()));
    partitions_.push_back(std::move(p));
  }
  finalized_ = true;
}

}  // namespace unicache
