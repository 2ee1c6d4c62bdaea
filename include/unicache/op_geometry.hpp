// unicache/op_geometry.hpp — what an op reads and writes, as sizes and strides
// worked out from its concrete shapes: a Transpose as a strided copy, a
// broadcast operand's strides, Attention's sizes and strides in either layout.
// Every backend that runs these ops derives them here, so the CPU and the GPU
// kernels read their operands the same way.
// For: backend authors.
//
// Errors: none; the shapes are the ones graph::finalize and shape inference
// checked (a permutation valid for its input, Attention's ranks and sizes).
// Thread safety: pure functions and plain values.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "unicache/graph.hpp"

namespace unicache {

// Row-major strides of `shape`, 0 where a dim is 1 (a broadcast operand repeats).
std::vector<long> broadcast_strides(const std::vector<std::int64_t>& shape);

// A Transpose as a copy: the output's dims and, for each, the input's stride
// along it, in elements, with axes of size 1 dropped and neighbours that read
// one run of the input merged: [B, S, h, d] by (0, 2, 1, 3) is dims
// {B, h, S, d} with strides {S*h*d, d, h*d, 1}. Never empty (one element:
// {1}, {1}); never more dims than the input. `permutation` must be valid for
// `in_shape` (each axis once: graph::finalize checked it); it is not checked
// here.
struct transpose_plan {
  std::vector<std::int64_t> dims;
  std::vector<std::int64_t> strides;
};
transpose_plan plan_transpose(const std::vector<std::int64_t>& in_shape, const std::vector<std::int64_t>& permutation);

// Attention's sizes and strides (elements) from its op and concrete inputs
// {Q, K, V[, mask]}, in either layout: a rank-3 bhld tensor is one batch of
// its first dim's heads. The mask's strides are 0 where it broadcasts.
struct attention_problem {
  std::int64_t batch = 1, heads = 1, length = 1, source = 1, head_size = 1, value_size = 1;
  std::array<long, 3> q{}, k{}, v{}, out{};  // per batch, head, row
  std::array<long, 4> mask{};                // per batch, head, row, column
  bool has_mask = false;
  float scale = 1.f;                         // the op's, or 1 / sqrt(head size)
  bool causal = false;
  attention_problem(const op& o, const std::vector<logical_tensor>& in);
};

}  // namespace unicache
