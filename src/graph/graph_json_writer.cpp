// to_json: a graph (and shape requests) as a graph JSON document of version 1
// (docs/graph-json.md), one tensor, op or request a line.
#include <charconv>
#include <string>

#include "graph/passes.hpp"
#include "graph/shape_requests.hpp"

namespace unicache {
namespace {

[[noreturn]] void unwritable(const std::string& what) { throw graph_error("to_json: " + what); }

void append_ints(std::string& out, const std::vector<std::int64_t>& values) {
  out += '[';
  for (std::size_t i = 0; i < values.size(); ++i) out += (i ? ", " : "") + std::to_string(values[i]);
  out += ']';
}
void append_ids(std::string& out, const std::vector<std::uint64_t>& ids) {
  out += '[';
  for (std::size_t i = 0; i < ids.size(); ++i) out += (i ? ", " : "") + std::to_string(ids[i]);
  out += ']';
}

// The shortest text that reads back as the same float.
void append_float(std::string& out, float value) {
  char text[64];
  const auto result = std::to_chars(text, text + sizeof text, value);
  out.append(text, result.ptr);
}

// A list member of the document: opened, each entry started on its own line, closed.
void open_list(std::string& out, const char* name) { out += ",\n  \"" + std::string(name) + "\": ["; }
void next_entry(std::string& out, std::size_t index) { out += index ? ",\n    " : "\n    "; }
void close_list(std::string& out, std::size_t count) { out += count ? "\n  ]" : "]"; }

void append_op(std::string& out, const op& o) {
  const std::string kind = to_string(o.kind);
  if (kind == "?") unwritable("op " + std::to_string(o.id) + " has an unknown kind " + std::to_string(static_cast<int>(o.kind)));
  if (o.kind != op_kind::matmul && (o.transpose_a || o.transpose_b)) {
    unwritable(graph_passes::describe_op(o) + " has a transpose flag, which only MatMul has");
  }
  out += "{\"kind\": \"" + kind + "\", \"inputs\": ";
  append_ids(out, o.inputs);
  out += ", \"outputs\": ";
  append_ids(out, o.outputs);
  if (o.kind == op_kind::matmul) {
    out += std::string(", \"transpose_a\": ") + (o.transpose_a ? "true" : "false") +
           ", \"transpose_b\": " + (o.transpose_b ? "true" : "false");
  } else if (normalization_parameters(o.kind) > 0) {
    out += ", \"epsilon\": ";
    append_float(out, o.epsilon);
  } else if (o.kind == op_kind::transpose) {
    out += ", \"permutation\": ";
    append_ints(out, o.permutation);
  } else if (o.kind == op_kind::attention) {
    if (o.scale != 0.f) {
      out += ", \"scale\": ";
      append_float(out, o.scale);
    }
    out += std::string(", \"causal\": ") + (o.causal ? "true" : "false") + ", \"layout\": \"" +
           (o.layout == attention_layout::blhd ? "blhd" : "bhld") + "\"";
  }
  out += '}';
}

void check_counts(const graph& g, std::size_t requests) {
  auto at_most = [](std::size_t count, const char* what) {
    if (count > kGraphJsonMaxItems) {
      unwritable(std::to_string(count) + " " + what + ", more than the " + std::to_string(kGraphJsonMaxItems) +
                 " graph_from_json reads");
    }
  };
  at_most(g.tensors().size(), "tensors");
  at_most(g.ops().size(), "ops");
  at_most(g.marked_outputs().size(), "outputs");
  at_most(requests, "requests");
  for (const logical_tensor& t : g.tensors()) {
    if (t.shape.size() > kGraphJsonMaxRank) {
      unwritable("tensor " + std::to_string(t.id) + " has " + std::to_string(t.shape.size()) +
                 " dimensions; the JSON form holds at most " + std::to_string(kGraphJsonMaxRank));
    }
    if (t.dtype != data_type::f32) unwritable("tensor " + std::to_string(t.id) + " is not f32");
  }
}

}  // namespace

std::string to_json(const graph& g, const std::vector<shape_request>& requests) {
  check_counts(g, requests.size());
  if (!requests.empty()) {
    const graph_passes::request_checker checker(g);
    for (std::size_t k = 0; k < requests.size(); ++k) checker.check(requests[k], "to_json: requests[" + std::to_string(k) + "]");
  }
  std::string out = "{\n  \"format\": \"unicache-graph\",\n  \"version\": " + std::to_string(kGraphJsonVersion);
  open_list(out, "tensors");
  for (std::size_t i = 0; i < g.tensors().size(); ++i) {
    const logical_tensor& t = g.tensors()[i];
    next_entry(out, i);
    out += "{\"id\": " + std::to_string(t.id) + ", \"shape\": ";
    append_ints(out, t.shape);
    out += std::string(", \"constant\": ") + (t.is_constant() ? "true" : "false") + "}";
  }
  close_list(out, g.tensors().size());
  open_list(out, "ops");
  for (std::size_t i = 0; i < g.ops().size(); ++i) {
    next_entry(out, i);
    append_op(out, g.ops()[i]);
  }
  close_list(out, g.ops().size());
  out += ",\n  \"outputs\": ";
  append_ids(out, g.marked_outputs());
  if (!requests.empty()) {
    open_list(out, "requests");
    for (std::size_t k = 0; k < requests.size(); ++k) {
      next_entry(out, k);
      out += '{';
      bool first = true;
      for (const auto& [id, shape] : requests[k]) {
        out += (first ? "\"" : ", \"") + std::to_string(id) + "\": ";
        append_ints(out, shape);
        first = false;
      }
      out += '}';
    }
    close_list(out, requests.size());
  }
  out += "\n}\n";
  if (out.size() > kGraphJsonMaxBytes) {
    unwritable("the document would be " + std::to_string(out.size()) + " bytes, more than the " +
               std::to_string(kGraphJsonMaxBytes) + " graph_from_json reads");
  }
  return out;
}

}  // namespace unicache
