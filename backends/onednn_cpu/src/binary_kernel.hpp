// The kernel of an Add or Multiply partition: one binary primitive, or a
// plain loop where both operands broadcast.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "primitives.hpp"

namespace unicache::onednn_cpu::detail {

// Add / Multiply with numpy broadcasting. oneDNN broadcasts its second
// source only, so a broadcast first operand is swapped (both ops commute);
// when both operands broadcast, a plain loop does it.
class binary_kernel final : public compiled_kernel {
 public:
  binary_kernel(const partition& p, const std::vector<logical_tensor>& in, const std::vector<logical_tensor>& out,
                const engine& e);

  void execute(stream& s, const std::vector<tensor>& inputs, const std::vector<tensor>& outputs) const override;

 private:
  void broadcast_loop(const float* x, const float* y, float* out) const;

  op_kind kind_;
  std::vector<std::int64_t> out_shape_;
  std::vector<std::int64_t> shapes_[2];
  bool swapped_ = false, loop_ = false;
  std::shared_ptr<const cached_primitive> prim_;
};

}  // namespace unicache::onednn_cpu::detail
