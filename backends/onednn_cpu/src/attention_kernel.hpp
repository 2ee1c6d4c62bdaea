// The kernel of an Attention partition: plain C++ over query rows, so that
// every shape runs without building anything.
#pragma once

#include <vector>

#include "primitives.hpp"
#include "unicache/op_geometry.hpp"

namespace unicache::onednn_cpu::detail {

// softmax(scale * Q K^T + mask) V, one query row at a time in one pass
// (online softmax), the rows split over oneDNN's threads
// (parallel.hpp) when there is enough work. Correct, not fast: it makes no
// use of oneDNN's matmul, so a frontend on the CPU keeps attention as
// MatMul, Softmax, MatMul where speed matters. Thread-safe: it keeps no
// state but its sizes.
class attention_kernel final : public compiled_kernel {
 public:
  attention_kernel(const partition& p, const std::vector<logical_tensor>& in);
  void execute(stream& s, const std::vector<tensor>& inputs, const std::vector<tensor>& outputs) const override;

 private:
  attention_problem problem_;
};

}  // namespace unicache::onednn_cpu::detail
