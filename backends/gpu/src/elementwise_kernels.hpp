// The GPU core's elementwise and row-wise kernels: Add / Multiply with
// broadcasting, ReLU, GELU, Sigmoid, Tanh, and Softmax and LayerNorm over the
// last axis.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <vector>

#include "device_kernel.hpp"

namespace unicache::gpu::detail {

// Add / Multiply with numpy broadcasting, up to rank 4.
class binary_kernel final : public device_kernel {
 public:
  binary_kernel(const device& d, const partition& p, const std::vector<logical_tensor>& in,
                const std::vector<logical_tensor>& out, const engine& e, const std::vector<kernel_binary>& preloaded);
  void execute(stream& s, const std::vector<tensor>& inputs, const std::vector<tensor>& outputs) const override;

 private:
  kernels::binary_problem problem_;
  launch_dims launch_;
  const kernel* program_ = nullptr;
};

// ReLU, GELU, Sigmoid, Tanh, and Softmax over the last axis.
class unary_kernel final : public device_kernel {
 public:
  unary_kernel(const device& d, const partition& p, const std::vector<logical_tensor>& in, const engine& e,
               const std::vector<kernel_binary>& preloaded);
  void execute(stream& s, const std::vector<tensor>& inputs, const std::vector<tensor>& outputs) const override;

 private:
  std::vector<std::int64_t> shape_;
  bool softmax_;
  std::int32_t team_ = 1;  // Softmax: work-items per row
  launch_dims launch_;
  const kernel* program_ = nullptr;
};

// LayerNorm or RMSNorm over the last axis, one work-group per row; epsilon
// is an argument, so one binary serves every epsilon.
class layer_norm_kernel final : public device_kernel {
 public:
  layer_norm_kernel(const device& d, const partition& p, const std::vector<logical_tensor>& in, const engine& e,
                    const std::vector<kernel_binary>& preloaded);
  void execute(stream& s, const std::vector<tensor>& inputs, const std::vector<tensor>& outputs) const override;

 private:
  std::int32_t cols_ = 1;
  float epsilon_ = 0.f;
  bool rms_ = false;
  launch_dims launch_;
  const kernel* program_ = nullptr;
};

// Transpose: one work-item per output element, reading the input along
// plan_transpose's strides.
class transpose_kernel final : public device_kernel {
 public:
  transpose_kernel(const device& d, const partition& p, const std::vector<logical_tensor>& in, const engine& e,
                   const std::vector<kernel_binary>& preloaded);
  void execute(stream& s, const std::vector<tensor>& inputs, const std::vector<tensor>& outputs) const override;

 private:
  static constexpr std::size_t kDims = 6;
  std::int64_t elements_ = 0;
  std::array<std::int64_t, kDims> dims_{}, strides_{};  // the plan, padded in front with dims of 1
  launch_dims launch_;
  const kernel* program_ = nullptr;
};

}  // namespace unicache::gpu::detail
