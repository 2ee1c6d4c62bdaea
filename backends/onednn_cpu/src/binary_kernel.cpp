// The Add / Multiply kernel: operands ordered for oneDNN's one-sided
// broadcast, a binary primitive, and the loop for two-sided broadcasts.
#include "binary_kernel.hpp"

#include <utility>

#include "engine_state.hpp"
#include "unicache/cache_key.hpp"

namespace unicache::onednn_cpu::detail {

binary_kernel::binary_kernel(const partition& p, const std::vector<logical_tensor>& in,
                             const std::vector<logical_tensor>& out, const engine& e)
    : kind_(p.ops().front().kind), out_shape_(out[0].shape) {
  const std::size_t rank = out_shape_.size();
  shapes_[0] = to_rank(in[0].shape, rank);
  shapes_[1] = to_rank(in[1].shape, rank);
  if (shapes_[0] != out_shape_) {
    std::swap(shapes_[0], shapes_[1]);
    swapped_ = true;
  }
  if (shapes_[0] != out_shape_) {  // both broadcast
    loop_ = true;
    return;
  }
  const auto m0 = plain_md(shapes_[0]), m1 = plain_md(shapes_[1]), md = plain_md(out_shape_);
  cache_key key;
  key.add("binary").add(static_cast<std::uint8_t>(kind_));
  add_md(key, m0);
  add_md(key, m1);
  const dnnl::engine& eng = e.native<engine_state>().eng;
  prim_ = primitive_for(e, key, [&] {
    dnnl::binary::primitive_desc pd(dnnl::binary::desc(binary_algorithm(kind_), m0, m1, md), primitive_attributes(),
                                    eng);
    return cached_primitive{dnnl::binary(pd), {}};
  });
}

void binary_kernel::execute(stream& s, const std::vector<tensor>& inputs, const std::vector<tensor>& outputs) const {
  const void* x = inputs[swapped_ ? 1 : 0].data;
  const void* y = inputs[swapped_ ? 0 : 1].data;
  if (loop_) {
    broadcast_loop(static_cast<const float*>(x), static_cast<const float*>(y), static_cast<float*>(outputs[0].data));
    return;
  }
  const dnnl::engine& eng = s.get_engine().native<engine_state>().eng;
  dnnl::stream& strm = s.native<stream_state>().strm;
  run_primitive(prim_->prim, strm,
                {{DNNL_ARG_SRC_0, dnnl::memory(plain_md(shapes_[0]), eng, const_cast<void*>(x))},
                 {DNNL_ARG_SRC_1, dnnl::memory(plain_md(shapes_[1]), eng, const_cast<void*>(y))},
                 {DNNL_ARG_DST, dnnl::memory(plain_md(out_shape_), eng, outputs[0].data)}});
  strm.wait();
}

void binary_kernel::broadcast_loop(const float* x, const float* y, float* out) const {
  const std::size_t rank = out_shape_.size();
  std::int64_t total = 1;
  for (std::int64_t d : out_shape_) total *= d;
  std::vector<std::int64_t> idx(rank, 0);
  for (std::int64_t flat = 0; flat < total; ++flat) {
    std::int64_t ox = 0, oy = 0;
    for (std::size_t d = 0; d < rank; ++d) {
      ox = ox * shapes_[0][d] + (shapes_[0][d] == 1 ? 0 : idx[d]);
      oy = oy * shapes_[1][d] + (shapes_[1][d] == 1 ? 0 : idx[d]);
    }
    out[flat] = kind_ == op_kind::add ? x[ox] + y[oy] : x[ox] * y[oy];
    for (std::size_t d = rank; d-- > 0;) {
      if (++idx[d] < out_shape_[d]) break;
      idx[d] = 0;
    }
  }
}

}  // namespace unicache::onednn_cpu::detail
