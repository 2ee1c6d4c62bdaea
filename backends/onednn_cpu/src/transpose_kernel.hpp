// The kernel of a Transpose partition: a copy in plain C++, so that every
// shape runs without building anything.
#pragma once

#include <cstdint>
#include <vector>

#include "primitives.hpp"
#include "unicache/op_geometry.hpp"

namespace unicache::onednn_cpu::detail {

// Writes the output dense from the input read along plan_transpose,
// the output's last axis in runs (a memcpy where its input stride is 1), rows
// split over oneDNN's threads (parallel.hpp) above 2^16 elements. Input and
// output must not overlap. Thread-safe: it keeps no state but its plan.
class transpose_kernel final : public compiled_kernel {
 public:
  transpose_kernel(const partition& p, const std::vector<logical_tensor>& in);
  void execute(stream& s, const std::vector<tensor>& inputs, const std::vector<tensor>& outputs) const override;

 private:
  transpose_plan plan_;
};

}  // namespace unicache::onednn_cpu::detail
