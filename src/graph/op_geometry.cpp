// What an op reads and writes as sizes and strides: a Transpose's plan, a
// broadcast operand's strides, Attention's sizes in either layout. The same
// for every backend (op_geometry.hpp).
#include "unicache/op_geometry.hpp"

#include <cmath>

namespace unicache {

transpose_plan plan_transpose(const std::vector<std::int64_t>& in_shape, const std::vector<std::int64_t>& permutation) {
  std::vector<std::int64_t> in_strides(in_shape.size(), 1);
  for (std::size_t d = in_shape.size(); d-- > 1;) in_strides[d - 1] = in_strides[d] * in_shape[d];
  transpose_plan plan;
  for (std::int64_t axis : permutation) {
    const auto a = static_cast<std::size_t>(axis);
    if (in_shape[a] == 1) continue;  // no stride to follow
    if (!plan.dims.empty() && plan.strides.back() == in_strides[a] * in_shape[a]) {
      plan.dims.back() *= in_shape[a];  // one run of input with the axis before
      plan.strides.back() = in_strides[a];
    } else {
      plan.dims.push_back(in_shape[a]);
      plan.strides.push_back(in_strides[a]);
    }
  }
  if (plan.dims.empty()) plan = {{1}, {1}};
  return plan;
}

std::vector<long> broadcast_strides(const std::vector<std::int64_t>& shape) {
  std::vector<long> out(shape.size());
  long stride = 1;
  for (std::size_t d = shape.size(); d-- > 0;) {
    out[d] = shape[d] == 1 ? 0 : stride;
    stride *= static_cast<long>(shape[d]);
  }
  return out;
}

attention_problem::attention_problem(const op& o, const std::vector<logical_tensor>& in)
    : has_mask(in.size() > 3), causal(o.causal) {
  const std::vector<std::int64_t>&qs = in[0].shape, &ks = in[1].shape, &vs = in[2].shape;
  const std::size_t rank = qs.size();
  const bool blhd = o.layout == attention_layout::blhd;
  head_size = qs[rank - 1];
  value_size = vs[rank - 1];
  if (blhd) {  // [B, L, H, D]
    batch = qs[0], length = qs[1], heads = qs[2], source = ks[1];
    q = {static_cast<long>(length * heads * head_size), static_cast<long>(head_size), static_cast<long>(heads * head_size)};
    k = {static_cast<long>(source * heads * head_size), static_cast<long>(head_size), static_cast<long>(heads * head_size)};
    v = {static_cast<long>(source * heads * value_size), static_cast<long>(value_size),
         static_cast<long>(heads * value_size)};
    out = {static_cast<long>(length * heads * value_size), static_cast<long>(value_size),
           static_cast<long>(heads * value_size)};
  } else {  // [B, H, L, D] or [H, L, D]
    batch = rank == 4 ? qs[0] : 1, heads = qs[rank - 3], length = qs[rank - 2], source = ks[rank - 2];
    q = {static_cast<long>(heads * length * head_size), static_cast<long>(length * head_size), static_cast<long>(head_size)};
    k = {static_cast<long>(heads * source * head_size), static_cast<long>(source * head_size), static_cast<long>(head_size)};
    v = {static_cast<long>(heads * source * value_size), static_cast<long>(source * value_size),
         static_cast<long>(value_size)};
    out = {static_cast<long>(heads * length * value_size), static_cast<long>(length * value_size),
           static_cast<long>(value_size)};
  }
  if (has_mask) {
    const std::vector<long> st = broadcast_strides(to_rank(in[3].shape, 4));
    mask = {st[0], st[1], st[2], st[3]};
  }
  scale = o.scale != 0.f ? o.scale : static_cast<float>(1.0 / std::sqrt(static_cast<double>(head_size)));
}

}  // namespace unicache
