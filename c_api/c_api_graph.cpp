// The C interface of graphs and partitions (unicache.h, "Graphs").
#include "unicache/unicache.h"

#include "c_api_internal.hpp"

using namespace unicache;
using namespace unicache::c_api;

namespace unicache::c_api {

const partition& part(unicache_partition_t p) {
  if (!p || !p->p) raise(UNICACHE_INVALID_HANDLE, "partition is NULL");
  return *p->p;
}
void tensor_at(const std::vector<logical_tensor>& list, size_t index, unicache_logical_tensor_t* tensor) {
  need(tensor, "tensor");
  if (index >= list.size()) raise(UNICACHE_INVALID_ARGUMENT, "tensor index out of range");
  *tensor = to_c(list[index]);
}

namespace {

// The C requests as C++ ones: each shape checked (ndims, dims), no tensor twice.
std::vector<shape_request> requests_of(const unicache_shape_request_t* requests, size_t num_requests) {
  if (num_requests) need(requests, "requests");
  std::vector<shape_request> out;
  for (size_t k = 0; k < num_requests; ++k) {
    const unicache_shape_request_t& r = requests[k];
    if (r.num_shapes) need(r.shapes, "requests[].shapes");
    shape_request& request = out.emplace_back();
    for (size_t i = 0; i < r.num_shapes; ++i) {
      const unicache_tensor_shape_t& s = r.shapes[i];
      if (!request.emplace(s.tensor_id, shape_of(s.ndims, s.dims)).second) {
        raise(UNICACHE_INVALID_ARGUMENT, "requests[" + std::to_string(k) + "]: tensor " + std::to_string(s.tensor_id) +
                                             " twice");
      }
    }
  }
  return out;
}

// For a conditional expression that maps the C attributes: no value, it raises.
[[noreturn]] op_attribute throw_unknown_attribute(unicache_op_attr_t attr) {
  raise(UNICACHE_INVALID_ARGUMENT, "unknown op attribute " + std::to_string(static_cast<int>(attr)));
}

}  // namespace
}  // namespace unicache::c_api

extern "C" {

// --- Graphs -------------------------------------------------------------------------

unicache_status_t unicache_graph_create(unicache_graph_t* graph) {
  return guarded([&] { *need(graph, "graph") = created(std::make_unique<unicache_graph>()); });
}

unicache_status_t unicache_graph_destroy(unicache_graph_t graph) { return destroy(graph, kGraphMagic, "graph"); }

unicache_status_t unicache_graph_add_tensor(unicache_graph_t graph, int32_t ndims, const int64_t* dims,
                                            int32_t is_constant, unicache_logical_tensor_t* tensor) {
  return guarded([&] {
    unicache_graph* g = live(graph, kGraphMagic, "graph");
    need(tensor, "tensor");
    *tensor = to_c(g->g.tensor(shape_of(ndims, dims),
                               is_constant ? tensor_property::constant : tensor_property::variable));
  });
}

unicache_status_t unicache_graph_add_op(unicache_graph_t graph, unicache_op_kind_t kind, const uint64_t* input_ids,
                                        size_t num_inputs, const uint64_t* output_ids, size_t num_outputs,
                                        int32_t transpose_a, int32_t transpose_b, uint64_t* op_id) {
  return guarded([&] {
    unicache_graph* g = live(graph, kGraphMagic, "graph");
    if (num_inputs) need(input_ids, "input_ids");
    if (num_outputs) need(output_ids, "output_ids");
    std::vector<logical_tensor> in, out;
    for (size_t i = 0; i < num_inputs; ++i) in.push_back(g->g.tensor_of(input_ids[i]));
    for (size_t i = 0; i < num_outputs; ++i) out.push_back(g->g.tensor_of(output_ids[i]));
    const std::uint64_t id = g->g.add_op(to_op(kind), in, out, transpose_a != 0, transpose_b != 0);
    if (op_id) *op_id = id;
  });
}

unicache_status_t unicache_graph_mark_output(unicache_graph_t graph, uint64_t tensor_id) {
  return guarded([&] {
    unicache_graph* g = live(graph, kGraphMagic, "graph");
    g->g.mark_output(g->g.tensor_of(tensor_id));
  });
}

unicache_status_t unicache_graph_set_op_attr_f32(unicache_graph_t graph, uint64_t op_id, unicache_op_attr_t attr,
                                                 float value) {
  return guarded([&] {
    unicache_graph* g = live(graph, kGraphMagic, "graph");
    if (attr == UNICACHE_OP_ATTR_PERMUTATION || attr == UNICACHE_OP_ATTR_CAUSAL || attr == UNICACHE_OP_ATTR_LAYOUT) {
      raise(UNICACHE_INVALID_ARGUMENT, "attribute " + std::to_string(static_cast<int>(attr)) +
                                           " is a list of integers: unicache_graph_set_op_attr_i64s sets it");
    }
    if (attr != UNICACHE_OP_ATTR_EPSILON && attr != UNICACHE_OP_ATTR_SCALE) {
      raise(UNICACHE_INVALID_ARGUMENT, "unknown op attribute " + std::to_string(static_cast<int>(attr)));
    }
    g->g.set_attribute(op_id, attr == UNICACHE_OP_ATTR_SCALE ? op_attribute::scale : op_attribute::epsilon, value);
  });
}

unicache_status_t unicache_graph_set_op_attr_i64s(unicache_graph_t graph, uint64_t op_id, unicache_op_attr_t attr,
                                                  const int64_t* values, size_t count) {
  return guarded([&] {
    unicache_graph* g = live(graph, kGraphMagic, "graph");
    if (attr == UNICACHE_OP_ATTR_EPSILON || attr == UNICACHE_OP_ATTR_SCALE) {
      raise(UNICACHE_INVALID_ARGUMENT, "attribute " + std::to_string(static_cast<int>(attr)) +
                                           " is a float: unicache_graph_set_op_attr_f32 sets it");
    }
    const op_attribute which = attr == UNICACHE_OP_ATTR_PERMUTATION ? op_attribute::permutation
                               : attr == UNICACHE_OP_ATTR_CAUSAL    ? op_attribute::causal
                               : attr == UNICACHE_OP_ATTR_LAYOUT    ? op_attribute::layout
                                                                    : throw_unknown_attribute(attr);
    if (count) need(values, "values");
    if (count > kMaxTransposeRank) {
      raise(UNICACHE_INVALID_GRAPH, "op " + std::to_string(op_id) + ": a list of " + std::to_string(count) +
                                        " values (at most " + std::to_string(kMaxTransposeRank) + ")");
    }
    g->g.set_attribute(op_id, which, std::vector<std::int64_t>(values, values + count));
  });
}

unicache_status_t unicache_graph_finalize(unicache_graph_t graph) {
  return guarded([&] {
    unicache_graph* g = live(graph, kGraphMagic, "graph");
    g->g.finalize();  // idempotent: partitions handed out before stay valid
    if (g->partitions.empty()) {
      for (const partition& p : g->g.partitions()) g->partitions.push_back({&p});
    }
  });
}

unicache_status_t unicache_graph_get_partition_count(unicache_graph_t graph, size_t* count) {
  return guarded([&] {
    unicache_graph* g = live(graph, kGraphMagic, "graph");
    if (!g->g.finalized()) raise(UNICACHE_INVALID_ARGUMENT, "the graph is not finalized");
    *need(count, "count") = g->partitions.size();
  });
}

unicache_status_t unicache_graph_get_partition(unicache_graph_t graph, size_t index, unicache_partition_t* partition) {
  return guarded([&] {
    unicache_graph* g = live(graph, kGraphMagic, "graph");
    need(partition, "partition");
    if (!g->g.finalized()) raise(UNICACHE_INVALID_ARGUMENT, "the graph is not finalized");
    if (index >= g->partitions.size()) raise(UNICACHE_INVALID_ARGUMENT, "partition index out of range");
    *partition = &g->partitions[index];
  });
}

unicache_status_t unicache_partition_get_fingerprint(unicache_partition_t partition, char* fingerprint,
                                                     size_t* size) {
  return guarded([&] { copy_out(part(partition).fingerprint(), fingerprint, size); });
}

unicache_status_t unicache_partition_get_input_count(unicache_partition_t partition, size_t* count) {
  return guarded([&] { *need(count, "count") = part(partition).inputs().size(); });
}
unicache_status_t unicache_partition_get_input(unicache_partition_t partition, size_t index,
                                               unicache_logical_tensor_t* tensor) {
  return guarded([&] { tensor_at(part(partition).inputs(), index, tensor); });
}
unicache_status_t unicache_partition_get_output_count(unicache_partition_t partition, size_t* count) {
  return guarded([&] { *need(count, "count") = part(partition).outputs().size(); });
}
unicache_status_t unicache_partition_get_output(unicache_partition_t partition, size_t index,
                                                unicache_logical_tensor_t* tensor) {
  return guarded([&] { tensor_at(part(partition).outputs(), index, tensor); });
}

// --- The JSON form ------------------------------------------------------------------

unicache_status_t unicache_graph_to_json(unicache_graph_t graph, const unicache_shape_request_t* requests,
                                         size_t num_requests, char* json, size_t* size) {
  return guarded([&] {
    unicache_graph* g = live(graph, kGraphMagic, "graph");
    need(size, "size");
    copy_out(to_json(g->g, requests_of(requests, num_requests)), json, size);
  });
}

unicache_status_t unicache_graph_create_from_json(const char* json, size_t json_size, unicache_graph_t* graph) {
  return guarded([&] {
    need(graph, "graph");
    if (json_size) need(json, "json");
    auto h = std::make_unique<unicache_graph>();
    h->g = graph_from_json(std::string_view(json ? json : "", json_size)).g;  // finalized
    for (const partition& p : h->g.partitions()) h->partitions.push_back({&p});
    *graph = created(std::move(h));
  });
}

}  // extern "C"
