// graph_from_json: a graph JSON document (docs/graph-json.md) read with the
// bounded JSON cursor into plain entries, then built into a graph, finalized,
// and its requests checked against the graph's inputs.
#include <initializer_list>
#include <optional>
#include <string>

#include "graph/passes.hpp"
#include "graph/shape_requests.hpp"
#include "util/env.hpp"
#include "util/json_cursor.hpp"
#include "util/parse.hpp"

namespace unicache {
namespace {

using detail::json_cursor;
using detail::json_type;

// The document as read, before its parts are checked against each other
// (members come in any order: ops may precede the tensors they read).
struct tensor_entry {
  std::vector<std::int64_t> shape;
  bool constant = false;
};
struct op_entry {
  std::string kind;
  std::vector<std::int64_t> inputs, outputs;
  std::optional<bool> transpose_a, transpose_b;
  std::optional<float> epsilon;
  std::optional<std::vector<std::int64_t>> permutation;
  std::optional<float> scale;        // Attention's
  std::optional<bool> causal;
  std::optional<std::string> layout;
};
struct document {
  std::vector<tensor_entry> tensors;
  std::vector<op_entry> ops;
  std::vector<std::int64_t> outputs;
  std::vector<shape_request> requests;
};

constexpr std::size_t kMaxNameBytes = 64;   // "format", "kind", "dtype"
constexpr std::size_t kMaxOpTensors = 8;    // an op's inputs or outputs (no kind takes more than 4)

std::string index_path(const std::string& path, std::size_t i) { return path + "[" + std::to_string(i) + "]"; }

[[noreturn]] void invalid(const std::string& path, const std::string& what) {
  throw graph_error("graph JSON: " + path + ": " + what);
}

// Runs `body` (a call into graph), prefixing its graph_error with `path`.
template <typename Body>
void at(const std::string& path, Body&& body) {
  try {
    body();
  } catch (const graph_error& e) {
    invalid(path, e.what());
  }
}

// An object's members: each key known, none twice, the required ones there.
class member_names {
 public:
  member_names(json_cursor& c, std::string path, std::initializer_list<const char*> known)
      : c_(c), path_(std::move(path)), known_(known), start_(c.offset()) {}

  // The index of `key` among the known names.
  std::size_t take(const std::string& key) {
    for (std::size_t i = 0; i < known_.size(); ++i) {
      if (key != known_[i]) continue;
      if (seen_ & (1u << i)) c_.fail_at(c_.offset(), path_, "the key " + detail::quoted(key) + " twice");
      seen_ |= 1u << i;
      return i;
    }
    std::string names;
    for (const char* name : known_) names += std::string(names.empty() ? "" : ", ") + name;
    c_.fail_at(c_.offset(), path_, "unknown key " + detail::quoted(key) + " (known: " + names + ")");
  }
  void require(std::size_t i) const {
    if (!(seen_ & (1u << i))) c_.fail_at(start_, path_, std::string("no \"") + known_[i] + "\"");
  }

 private:
  json_cursor& c_;
  std::string path_;
  std::vector<const char*> known_;
  std::size_t start_;
  unsigned seen_ = 0;
};

// An array of at most `max` integers.
std::vector<std::int64_t> read_ints(json_cursor& c, const std::string& path, std::size_t max, const char* noun) {
  c.expect_type(json_type::array, path);
  std::vector<std::int64_t> out;
  c.read_array([&](std::size_t i) {
    if (i >= max) c.fail_at(c.offset(), path, "more than " + std::to_string(max) + " " + noun);
    if (c.next() != json_type::number) c.expect_type(json_type::number, index_path(path, i));
    out.push_back(c.read_integer());
  });
  return out;
}

// A shape: at most kGraphJsonMaxRank dims, each -1 or 0 to 2^32, and at
// most 2^40 elements (what the kernels' size arithmetic holds).
std::vector<std::int64_t> read_dims(json_cursor& c, const std::string& path) {
  const std::size_t start = c.offset();
  std::vector<std::int64_t> dims = read_ints(c, path, kGraphJsonMaxRank, "dimensions");
  std::int64_t elements = 1;
  for (std::size_t i = 0; i < dims.size(); ++i) {
    if (dims[i] < -1 || dims[i] > (std::int64_t{1} << 32)) {
      c.fail_at(start, index_path(path, i), "a dimension must be -1 or 0 to 2^32, not " + std::to_string(dims[i]));
    }
    if (dims[i] > 0 && __builtin_mul_overflow(elements, dims[i], &elements)) elements = INT64_MAX;
  }
  if (elements > (std::int64_t{1} << 40)) c.fail_at(start, path, "more than 2^40 elements");
  return dims;
}

bool read_bool(json_cursor& c, const std::string& path) {
  c.expect_type(json_type::boolean, path);
  return c.read_boolean();
}

tensor_entry read_tensor(json_cursor& c, std::size_t index) {
  const std::string path = index_path("tensors", index);
  c.expect_type(json_type::object, path);
  member_names members(c, path, {"id", "shape", "constant", "dtype"});
  tensor_entry t;
  c.read_object([&](const std::string& key) {
    switch (members.take(key)) {
      case 0: {
        c.expect_type(json_type::number, path + ".id");
        const std::size_t start = c.offset();
        const std::int64_t id = c.read_integer();
        if (id < 1 || static_cast<std::uint64_t>(id) != index + 1) {
          c.fail_at(start, path + ".id", std::to_string(id) + ", but the tensor at this position has id " +
                                             std::to_string(index + 1) + " (ids are 1, 2, 3, ... in order)");
        }
        break;
      }
      case 1: t.shape = read_dims(c, path + ".shape"); break;
      case 2: t.constant = read_bool(c, path + ".constant"); break;
      default: {
        c.expect_type(json_type::string, path + ".dtype");
        const std::size_t start = c.offset();
        const std::string dtype = c.read_string(kMaxNameBytes);
        if (dtype != "f32") c.fail_at(start, path + ".dtype", detail::quoted(dtype) + " is not a dtype (only \"f32\")");
      }
    }
  });
  members.require(0);
  members.require(1);
  return t;
}

op_entry read_op(json_cursor& c, std::size_t index) {
  const std::string path = index_path("ops", index);
  c.expect_type(json_type::object, path);
  member_names members(c, path, {"kind", "inputs", "outputs", "transpose_a", "transpose_b", "epsilon", "permutation",
                                 "scale", "causal", "layout"});
  op_entry o;
  c.read_object([&](const std::string& key) {
    switch (members.take(key)) {
      case 0:
        c.expect_type(json_type::string, path + ".kind");
        o.kind = c.read_string(kMaxNameBytes);
        break;
      case 1: o.inputs = read_ints(c, path + ".inputs", kMaxOpTensors, "tensors"); break;
      case 2: o.outputs = read_ints(c, path + ".outputs", kMaxOpTensors, "tensors"); break;
      case 3: o.transpose_a = read_bool(c, path + ".transpose_a"); break;
      case 4: o.transpose_b = read_bool(c, path + ".transpose_b"); break;
      case 5:
        c.expect_type(json_type::number, path + ".epsilon");
        o.epsilon = c.read_float();
        break;
      case 6: o.permutation = read_ints(c, path + ".permutation", kGraphJsonMaxRank, "axes"); break;
      case 7:
        c.expect_type(json_type::number, path + ".scale");
        o.scale = c.read_float();
        break;
      case 8: o.causal = read_bool(c, path + ".causal"); break;
      default:
        c.expect_type(json_type::string, path + ".layout");
        o.layout = c.read_string(kMaxNameBytes);
    }
  });
  members.require(0);
  members.require(1);
  members.require(2);
  return o;
}

shape_request read_request(json_cursor& c, std::size_t index) {
  const std::string path = index_path("requests", index);
  c.expect_type(json_type::object, path);
  shape_request request;
  c.read_object([&](const std::string& key) {
    const std::size_t start = c.offset();
    const std::optional<std::uint64_t> id = detail::parse_decimal(key, kGraphJsonMaxItems);
    if (!id || *id == 0) {
      c.fail_at(start, path, "the key " + detail::quoted(key) + " is not a tensor id (a decimal number from 1)");
    }
    std::vector<std::int64_t> shape = read_dims(c, path + "[\"" + key + "\"]");
    if (!request.emplace(*id, std::move(shape)).second) {
      c.fail_at(start, path, "tensor " + std::to_string(*id) + " twice");
    }
  });
  return request;
}

// A list member of the document, at most kGraphJsonMaxItems entries.
template <typename ReadOne>
void read_list(json_cursor& c, const char* name, ReadOne&& read_one) {
  c.expect_type(json_type::array, name);
  c.read_array([&](std::size_t i) {
    if (i >= kGraphJsonMaxItems) {
      c.fail_at(c.offset(), name, "more than " + std::to_string(kGraphJsonMaxItems) + " entries");
    }
    read_one(i);
  });
}

document read_document(json_cursor& c) {
  if (c.next() != json_type::object) c.fail("expected '{' (a graph JSON document is an object)");
  document d;
  member_names members(c, "the document", {"format", "version", "tensors", "ops", "outputs", "requests"});
  c.read_object([&](const std::string& key) {
    switch (members.take(key)) {
      case 0: {
        c.expect_type(json_type::string, "format");
        const std::size_t start = c.offset();
        const std::string format = c.read_string(kMaxNameBytes);
        if (format != "unicache-graph") c.fail_at(start, "format", detail::quoted(format) + " is not \"unicache-graph\"");
        break;
      }
      case 1: {
        c.expect_type(json_type::number, "version");
        const std::size_t start = c.offset();
        const std::int64_t version = c.read_integer();
        if (version != kGraphJsonVersion) {
          c.fail_at(start, "version", "version " + std::to_string(version) + " is not supported (this unicache reads version " +
                                          std::to_string(kGraphJsonVersion) + ")");
        }
        break;
      }
      case 2: read_list(c, "tensors", [&](std::size_t i) { d.tensors.push_back(read_tensor(c, i)); }); break;
      case 3: read_list(c, "ops", [&](std::size_t i) { d.ops.push_back(read_op(c, i)); }); break;
      case 4: d.outputs = read_ints(c, "outputs", kGraphJsonMaxItems, "tensors"); break;
      default: read_list(c, "requests", [&](std::size_t i) { d.requests.push_back(read_request(c, i)); });
    }
  });
  c.expect_end();
  for (std::size_t required = 0; required < 4; ++required) members.require(required);
  return d;
}

// The op kind whose to_string() is `name`.
std::optional<op_kind> kind_named(std::string_view name) {
  for (unsigned k = 0; k < 256 && name != "?"; ++k) {
    if (name == to_string(static_cast<op_kind>(k))) return static_cast<op_kind>(k);
  }
  return std::nullopt;
}
std::string known_kinds() {
  std::string names;
  for (unsigned k = 0; k < 256; ++k) {
    const std::string name = to_string(static_cast<op_kind>(k));
    if (name != "?") names += (names.empty() ? "" : ", ") + name;
  }
  return names;
}

// The tensors `ids` name, each declared in `g`.
std::vector<logical_tensor> declared(const graph& g, const std::vector<std::int64_t>& ids, const std::string& path) {
  std::vector<logical_tensor> out;
  for (std::size_t j = 0; j < ids.size(); ++j) {
    if (ids[j] < 1 || static_cast<std::uint64_t>(ids[j]) > g.tensors().size()) {
      invalid(index_path(path, j), "tensor " + std::to_string(ids[j]) + " is not declared");
    }
    out.push_back(g.tensors()[static_cast<std::size_t>(ids[j]) - 1]);
  }
  return out;
}

void add_op(graph& g, const op_entry& e, std::size_t index) {
  const std::string path = index_path("ops", index);
  const std::optional<op_kind> kind = kind_named(e.kind);
  if (!kind) invalid(path + ".kind", detail::quoted(e.kind) + " is not an op kind (" + known_kinds() + ")");
  auto only_for = [&](bool present, const char* attribute, op_kind owner) {
    if (present && *kind != owner) {
      invalid(path + "." + attribute, std::string(to_string(*kind)) + " has no " + attribute + " (" + to_string(owner) + " has)");
    }
  };
  only_for(e.transpose_a.has_value(), "transpose_a", op_kind::matmul);
  only_for(e.transpose_b.has_value(), "transpose_b", op_kind::matmul);
  if (e.epsilon && normalization_parameters(*kind) == 0) {
    invalid(path + ".epsilon", std::string(to_string(*kind)) + " has no epsilon (LayerNorm and RMSNorm have)");
  }
  only_for(e.permutation.has_value(), "permutation", op_kind::transpose);
  if (*kind == op_kind::transpose && !e.permutation) invalid(path, "a Transpose needs \"permutation\"");
  only_for(e.scale.has_value(), "scale", op_kind::attention);
  only_for(e.causal.has_value(), "causal", op_kind::attention);
  only_for(e.layout.has_value(), "layout", op_kind::attention);
  if (e.layout && *e.layout != "bhld" && *e.layout != "blhd") {
    invalid(path + ".layout", detail::quoted(*e.layout) + " is not an attention layout (bhld, blhd)");
  }
  const std::uint64_t id = g.add_op(*kind, declared(g, e.inputs, path + ".inputs"), declared(g, e.outputs, path + ".outputs"),
                                    e.transpose_a.value_or(false), e.transpose_b.value_or(false));
  if (e.epsilon) at(path + ".epsilon", [&] { g.set_attribute(id, op_attribute::epsilon, *e.epsilon); });
  if (e.permutation) at(path + ".permutation", [&] { g.set_attribute(id, op_attribute::permutation, *e.permutation); });
  if (e.scale) at(path + ".scale", [&] { g.set_attribute(id, op_attribute::scale, *e.scale); });
  if (e.causal) g.set_attribute(id, op_attribute::causal, std::vector<std::int64_t>{*e.causal ? 1 : 0});
  if (e.layout) g.set_attribute(id, op_attribute::layout, std::vector<std::int64_t>{*e.layout == "blhd" ? 1 : 0});
}

}  // namespace

graph_document graph_from_json(std::string_view json) {
  if (json.size() > kGraphJsonMaxBytes) {
    throw graph_error("graph JSON: " + std::to_string(json.size()) + " bytes, more than the limit of " +
                      std::to_string(kGraphJsonMaxBytes) + " (64 MiB)");
  }
  document d;
  try {
    json_cursor c(json);
    d = read_document(c);
  } catch (const detail::json_error& e) {
    throw graph_error(std::string("graph JSON: ") + e.what());
  }
  graph_document doc;
  graph& g = doc.g;
  for (std::size_t i = 0; i < d.tensors.size(); ++i) {
    at(index_path("tensors", i) + ".shape", [&] {
      g.tensor(std::move(d.tensors[i].shape), d.tensors[i].constant ? tensor_property::constant : tensor_property::variable);
    });
  }
  for (std::size_t i = 0; i < d.ops.size(); ++i) add_op(g, d.ops[i], i);
  for (const logical_tensor& t : declared(g, d.outputs, "outputs")) g.mark_output(t);
  d.tensors = {};  // the graph holds them now: memory for finalize()
  d.ops = {};
  try {
    g.finalize();
  } catch (const graph_error& e) {
    throw graph_error(std::string("graph JSON: ") + e.what());
  }
  const graph_passes::request_checker checker(g);
  for (std::size_t k = 0; k < d.requests.size(); ++k) checker.check(d.requests[k], "graph JSON: " + index_path("requests", k));
  doc.requests = std::move(d.requests);
  return doc;
}

}  // namespace unicache
