// The kernel of an eltwise or Softmax partition: one oneDNN primitive.
#pragma once

#include <memory>
#include <oneapi/dnnl/dnnl.hpp>
#include <vector>

#include "primitives.hpp"

namespace unicache::onednn_cpu::detail {

// ReLU, GELU, Sigmoid, Tanh, Softmax (last axis): one primitive, SRC -> DST.
class unary_kernel final : public compiled_kernel {
 public:
  unary_kernel(const partition& p, const std::vector<logical_tensor>& in, const engine& e);

  void execute(stream& s, const std::vector<tensor>& inputs, const std::vector<tensor>& outputs) const override;

 private:
  dnnl::memory::desc md_;
  std::shared_ptr<const cached_primitive> prim_;
};

}  // namespace unicache::onednn_cpu::detail
