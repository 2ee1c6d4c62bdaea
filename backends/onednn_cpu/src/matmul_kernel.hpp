// The kernel of a fused MatMul partition: one matmul primitive with post-ops
// (shape-agnostic where the mode asks), or a matmul and a primitive per step.
#pragma once

#include <cstddef>
#include <memory>
#include <oneapi/dnnl/dnnl.hpp>
#include <optional>
#include <vector>

#include "packed_weights.hpp"
#include "primitives.hpp"

namespace unicache::onednn_cpu::detail {

// MatMul -> (Add|Multiply)* -> eltwise*: one matmul with post-ops, or, if
// this oneDNN cannot fuse a post-op's broadcast, a matmul followed by one
// primitive per remaining op, applied in place on the output.
//
// With a shape-agnostic mode (adaptive, agnostic) the fused matmul is created with every dim
// but K and N as DNNL_RUNTIME_DIM_VAL, so one primitive serves every M and
// batch; the tensors' real dims are given at execution. Where oneDNN
// refuses runtime dims for a configuration, the kernel falls back to a
// primitive for this shape.
class matmul_kernel final : public compiled_kernel {
 public:
  matmul_kernel(const partition& p, const std::vector<logical_tensor>& in,
                const std::vector<logical_tensor>& out, const engine& e);

  // Adaptive mode's first shape of a configuration: a primitive for exactly
  // that shape, which no class's kernel would beat.
  bool built_for_its_shapes() const override { return own_shapes_; }

  void execute(stream& s, const std::vector<tensor>& inputs, const std::vector<tensor>& outputs) const override;

 private:
  struct post {
    op_kind kind;
    std::size_t input;  // binary: which partition input is the operand
    dnnl::memory::desc md;
  };
  struct step {
    std::shared_ptr<const cached_primitive> prim;
    std::optional<std::size_t> input;
    dnnl::memory::desc operand_md;
  };
  // A post-op the runtime-dims primitive cannot take (oneDNN's runtime-dims
  // matmul fuses no full-size operand, such as a residual), run after it on
  // one power-of-two block of rows of C: every shape shares these
  // primitives, none is built per shape.
  struct block_step {
    std::int64_t first_row = 0, rows = 0;
    std::shared_ptr<const cached_primitive> prim;
    std::optional<std::size_t> input;  // binary: the operand's partition input
    bool operand_whole = false;        // the operand advances with C's rows (else one row for all)
    dnnl::memory::desc md, operand_md;
  };

  std::shared_ptr<const cached_primitive> make_matmul(const engine& e, const std::vector<post>& posts);

  // The same matmul with every dim but K (of A) and N (of C) a runtime dim
  // (with a variable rank-3 B, every dim of A, B and C), and a post-op operand's
  // dims runtime wherever they follow C's.
  std::shared_ptr<const cached_primitive> make_runtime_matmul(const engine& e, const std::vector<post>& posts,
                                                              bool* built);

  std::shared_ptr<const cached_primitive> make_matmul(const engine& e, const dnnl::memory::desc& a_md,
                                                      const dnnl::memory::desc& dst_md, const std::vector<post>& posts,
                                                      const std::vector<dnnl::memory::desc>& post_mds,
                                                      bool* built = nullptr,
                                                      const std::optional<dnnl::memory::desc>& b_runtime = {});

  step make_step(const engine& e, const post& x);

  // Shape-agnostic with the longest prefix of `posts` the runtime-dims
  // primitive fuses and the rest as block steps; false when no split works.
  bool make_runtime_with_block_steps(const engine& e, const std::vector<post>& posts, bool* built);
  std::vector<block_step> make_block_steps(const engine& e, const post& x) const;

  dnnl::memory::desc a_md_, b_user_md_, dst_md_;
  bool constant_b_ = false, transpose_a_ = false;
  bool own_shapes_ = false;  // adaptive, a configuration's first shape: a primitive for it alone
  std::shared_ptr<const cached_primitive> prim_;
  std::vector<post> fused_;
  std::vector<step> steps_;
  std::vector<block_step> block_steps_;
  weight_slot slot_;
};

}  // namespace unicache::onednn_cpu::detail
