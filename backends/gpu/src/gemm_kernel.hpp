// The GPU core's GEMM: MatMul -> (Add|Multiply)* -> eltwise* as one tiled
// kernel with the chain in its epilogue, a constant rank-2 B packed once
// per contents and context, and split-K through the stream's workspace.
#pragma once

#include <memory>
#include <vector>

#include "device_kernel.hpp"

namespace unicache {
template <typename T>
class constant_registry;
}  // namespace unicache

namespace unicache::gpu::detail {

class gemm_kernel final : public device_kernel {
 public:
  // The generic kernel of the engine's tiles, in the current shape mode.
  gemm_kernel(const device& d, const partition& p, const std::vector<logical_tensor>& in,
              const std::vector<logical_tensor>& out, const engine& e, const std::vector<kernel_binary>& preloaded);
  // A kernel of `tiles`; `any_rows`: a shape class's, which runs every M of
  // the class (it reads M from the output's shape).
  gemm_kernel(const device& d, const partition& p, const std::vector<logical_tensor>& in,
              const std::vector<logical_tensor>& out, const engine& e, const std::vector<kernel_binary>& preloaded,
              const kernels::gemm_tiles& tiles, bool any_rows);

  void execute(stream& s, const std::vector<tensor>& inputs, const std::vector<tensor>& outputs) const override;
  // A generic GEMM on its configuration's other split-K variant while its
  // own is built in the background.
  bool stand_in() const override { return stand_in_; }

  // Enqueues the GEMM on `b` as the kernel reads it (packed, if it packs)
  // for `rows` rows (0: the rows it was compiled for).
  void run_gemm(const stream& s, buffer a, buffer b, buffer c, const std::vector<buffer>& posts, long rows) const;

  struct packed_weight;  // what the constant tensor cache holds

 private:
  std::shared_ptr<packed_weight> packed(const stream& s, const tensor& t) const;

  kernels::gemm_problem problem_;
  bool any_rows_ = false;
  bool stand_in_ = false;
  launch_dims launch_, pack_launch_;
  const kernel* gemm_ = nullptr;
  const kernel* pack_ = nullptr;
  const kernel* reduce_ = nullptr;
  int reduce_work_group_ = 1;
  // The backend's weight registry and counters, looked up once: an
  // execution takes no process-wide lock to find them.
  constant_registry<packed_weight>* weights_ = nullptr;
  counters* counters_;
  std::shared_ptr<void> slot_;  // the packed weight's slot in the registry
};

}  // namespace unicache::gpu::detail
