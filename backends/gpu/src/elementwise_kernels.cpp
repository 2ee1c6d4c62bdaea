// The GPU core's binary, eltwise, Softmax, LayerNorm and Transpose kernels.
#include "elementwise_kernels.hpp"

#include <limits>
#include <string>

#include "unicache/compiler.hpp"

namespace unicache::gpu::detail {

binary_kernel::binary_kernel(const device& d, const partition& p, const std::vector<logical_tensor>& in,
                             const std::vector<logical_tensor>& out, const engine& e,
                             const std::vector<kernel_binary>& preloaded)
    : device_kernel(d), problem_(in, out) {
  const int wg = d.facts(e).vector_work_group;
  launch_ = checked_dims(d, {kernels::round_up(kernels::elements(problem_.out), wg), 1, 1},
                         {static_cast<std::size_t>(wg), 1, 1}, "Add/Multiply");
  program_ = add_program(e, kernels::binary_source(d.dialect(), p.ops().front().kind, wg), preloaded);
}

void binary_kernel::execute(stream& s, const std::vector<tensor>& inputs, const std::vector<tensor>& outputs) const {
  execution run(*this, s);
  kernel_args args;
  args.add(inputs[0].data).add(inputs[1].data).add(outputs[0].data);
  args.add(std::int64_t{kernels::elements(problem_.out)});
  for (int dim = 1; dim < 4; ++dim) args.add(std::int32_t(problem_.out[dim]));
  for (long st : problem_.a_strides) args.add(std::int64_t{st});
  for (long st : problem_.b_strides) args.add(std::int64_t{st});
  launch(*program_, s, args, launch_);
  run.finish();
}

unary_kernel::unary_kernel(const device& d, const partition& p, const std::vector<logical_tensor>& in,
                           const engine& e, const std::vector<kernel_binary>& preloaded)
    : device_kernel(d), shape_(in[0].shape), softmax_(p.ops().front().kind == op_kind::softmax) {
  const int wg = d.facts(e).vector_work_group;
  const std::int64_t n = kernels::elements(shape_);
  const std::int64_t cols = shape_.empty() ? 1 : shape_.back();
  const auto local = static_cast<std::size_t>(wg);
  if (softmax_ && cols > std::numeric_limits<int>::max()) {
    throw compile_error(std::string(d.name()) + ": Softmax over " + std::to_string(cols) +
                        " columns (at most 2147483647)");
  }
  team_ = kernels::softmax_team(wg, cols);
  const std::int64_t rows_per_group = wg / team_;
  launch_ = softmax_ && cols > 0
                ? checked_dims(d, {static_cast<std::size_t>((n / cols + rows_per_group - 1) / rows_per_group) * local, 1, 1},
                               {local, 1, 1}, "Softmax")
                : checked_dims(d, {kernels::round_up(n, wg), 1, 1}, {local, 1, 1}, "the eltwise op");
  program_ = add_program(e,
                         softmax_ ? kernels::softmax_source(d.dialect(), wg)
                                  : kernels::eltwise_source(d.dialect(), p.ops().front().kind, wg),
                         preloaded);
}

void unary_kernel::execute(stream& s, const std::vector<tensor>& inputs, const std::vector<tensor>& outputs) const {
  execution run(*this, s);
  kernel_args args;
  args.add(inputs[0].data).add(outputs[0].data);
  if (softmax_) {
    const std::int64_t cols = shape_.empty() ? 1 : shape_.back();
    args.add(std::int32_t(cols)).add(std::int64_t{cols > 0 ? kernels::elements(shape_) / cols : 0}).add(team_);
  } else {
    args.add(std::int64_t{kernels::elements(shape_)});
  }
  launch(*program_, s, args, launch_);  // nothing for an empty tensor
  run.finish();
}

layer_norm_kernel::layer_norm_kernel(const device& d, const partition& p, const std::vector<logical_tensor>& in,
                                     const engine& e, const std::vector<kernel_binary>& preloaded)
    : device_kernel(d), epsilon_(p.ops().front().epsilon), rms_(p.ops().front().kind == op_kind::rms_norm) {
  const std::vector<std::int64_t>& shape = in[0].shape;
  const std::int64_t cols = shape.back();
  if (cols > std::numeric_limits<std::int32_t>::max()) {
    throw compile_error(std::string(d.name()) + ": " + to_string(p.ops().front().kind) + " over " + std::to_string(cols) +
                        " columns (at most 2147483647)");
  }
  cols_ = static_cast<std::int32_t>(cols);
  const int wg = d.facts(e).vector_work_group;
  const auto local = static_cast<std::size_t>(wg);
  launch_ = checked_dims(d, {static_cast<std::size_t>(kernels::elements(shape) / cols) * local, 1, 1}, {local, 1, 1},
                         "LayerNorm");
  program_ = add_program(e, kernels::layer_norm_source(d.dialect(), wg, rms_), preloaded);
}

void layer_norm_kernel::execute(stream& s, const std::vector<tensor>& inputs,
                                const std::vector<tensor>& outputs) const {
  execution run(*this, s);
  kernel_args args;
  // RMSNorm has no beta: gamma in its place, which the kernel does not read.
  args.add(inputs[0].data).add(inputs[1].data).add(inputs[rms_ ? 1 : 2].data).add(outputs[0].data);
  args.add(cols_).add(epsilon_);
  launch(*program_, s, args, launch_);
  run.finish();
}

transpose_kernel::transpose_kernel(const device& d, const partition& p, const std::vector<logical_tensor>& in,
                                   const engine& e, const std::vector<kernel_binary>& preloaded)
    : device_kernel(d), elements_(kernels::elements(in[0].shape)) {
  const transpose_plan plan = plan_transpose(in[0].shape, p.ops().front().permutation);
  dims_.fill(1);
  const std::size_t pad = kDims - plan.dims.size();
  for (std::size_t k = 0; k < plan.dims.size(); ++k) {
    dims_[pad + k] = plan.dims[k];
    strides_[pad + k] = plan.strides[k];
    if (pad + k > 0 && plan.dims[k] > std::numeric_limits<std::int32_t>::max()) {
      throw compile_error(std::string(d.name()) + ": Transpose of " + shape_to_string(in[0].shape) +
                          " has an inner run of " + std::to_string(plan.dims[k]) + " elements (at most 2147483647)");
    }
  }
  const int wg = d.facts(e).vector_work_group;
  launch_ = checked_dims(d, {kernels::round_up(elements_, wg), 1, 1}, {static_cast<std::size_t>(wg), 1, 1},
                         "Transpose");
  program_ = add_program(e, kernels::transpose_source(d.dialect(), wg), preloaded);
}

void transpose_kernel::execute(stream& s, const std::vector<tensor>& inputs,
                               const std::vector<tensor>& outputs) const {
  execution run(*this, s);
  kernel_args args;
  args.add(inputs[0].data).add(outputs[0].data).add(std::int64_t{elements_});
  for (std::size_t k = 1; k < kDims; ++k) args.add(static_cast<std::int32_t>(dims_[k]));
  for (std::int64_t st : strides_) args.add(std::int64_t{st});
  launch(*program_, s, args, launch_);  // nothing for an empty tensor
  run.finish();
}

}  // namespace unicache::gpu::detail
