// The eltwise / Softmax kernel: an eltwise_forward or softmax_forward
// primitive, cached per op and shape.
#include "unary_kernel.hpp"

#include "engine_state.hpp"
#include "unicache/cache_key.hpp"

namespace unicache::onednn_cpu::detail {

unary_kernel::unary_kernel(const partition& p, const std::vector<logical_tensor>& in, const engine& e)
    : md_(plain_md(in[0].shape)) {
  const op_kind k = p.ops().front().kind;
  cache_key key;
  key.add("unary").add(static_cast<std::uint8_t>(k));
  add_md(key, md_);
  const dnnl::engine& eng = e.native<engine_state>().eng;
  prim_ = primitive_for(e, key, [&] {
    if (k == op_kind::softmax) {
      const int axis = static_cast<int>(in[0].shape.size()) - 1;
      dnnl::softmax_forward::primitive_desc pd(
          dnnl::softmax_forward::desc(dnnl::prop_kind::forward_inference, md_, axis), eng);
      return cached_primitive{dnnl::softmax_forward(pd), {}};
    }
    dnnl::eltwise_forward::primitive_desc pd(
        dnnl::eltwise_forward::desc(dnnl::prop_kind::forward_inference, eltwise_algorithm(k), md_, 0.f, 0.f), eng);
    return cached_primitive{dnnl::eltwise_forward(pd), {}};
  });
}

void unary_kernel::execute(stream& s, const std::vector<tensor>& inputs, const std::vector<tensor>& outputs) const {
  const dnnl::engine& eng = s.get_engine().native<engine_state>().eng;
  dnnl::stream& strm = s.native<stream_state>().strm;
  prim_->prim.execute(strm, {{DNNL_ARG_SRC, dnnl::memory(md_, eng, inputs[0].data)},
                             {DNNL_ARG_DST, dnnl::memory(md_, eng, outputs[0].data)}});
  strm.wait();
}

}  // namespace unicache::onednn_cpu::detail
