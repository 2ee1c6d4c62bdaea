// The GPU core's Attention kernel.
#include "attention_kernel.hpp"

#include <limits>
#include <string>

#include "unicache/compiler.hpp"

namespace unicache::gpu::detail {

attention_kernel::attention_kernel(const device& d, const partition& p, const std::vector<logical_tensor>& in,
                                   const engine& e, const std::vector<kernel_binary>& preloaded)
    : device_kernel(d), problem_(p.ops().front(), in) {
  const attention_problem& a = problem_;
  constexpr std::int64_t int_max = std::numeric_limits<std::int32_t>::max();
  if (a.head_size > kernels::kAttentionMaxHeadSize || a.value_size > kernels::kAttentionMaxHeadSize) {
    throw compile_error(std::string(d.name()) + ": Attention with head sizes " + std::to_string(a.head_size) + " and " +
                      std::to_string(a.value_size) + " (the generated kernel takes up to " +
                      std::to_string(kernels::kAttentionMaxHeadSize) + ")");
  }
  if (a.length > int_max || a.source > int_max || a.heads > int_max) {
    throw compile_error(std::string(d.name()) + ": Attention over " + std::to_string(a.length) + " x " +
                        std::to_string(a.source) + " scores of " + std::to_string(a.heads) +
                        " heads (each at most 2147483647)");
  }
  const std::size_t local = kernels::attention_local_bytes(static_cast<int>(a.head_size), static_cast<int>(a.value_size));
  if (local > d.facts(e).local_memory_bytes) {
    throw compile_error(std::string(d.name()) + ": Attention with head sizes " + std::to_string(a.head_size) + " and " +
                        std::to_string(a.value_size) + " needs " + std::to_string(local) +
                        " bytes of local memory per work-group; the device has " +
                        std::to_string(d.facts(e).local_memory_bytes));
  }
  kernels::attention_config c;
  c.head_size = static_cast<int>(a.head_size);
  c.value_size = static_cast<int>(a.value_size);
  c.causal = a.causal;
  c.mask = a.has_mask;
  const std::int64_t rows = kernels::attention_rows(c.head_size, c.value_size);
  const std::int64_t blocks = (a.length + rows - 1) / rows;
  blocks_ = static_cast<std::int32_t>(blocks);
  const std::int64_t groups = blocks * a.heads * a.batch;
  if (groups > int_max) {
    throw compile_error(std::string(d.name()) + ": Attention of " + std::to_string(groups) +
                        " work-groups (at most 2147483647)");
  }
  launch_ = checked_dims(d, {static_cast<std::size_t>(groups) * 256, 1, 1}, {256, 1, 1}, "Attention");
  program_ = add_program(e, kernels::attention_source(d.dialect(), c), preloaded);
}

void attention_kernel::execute(stream& s, const std::vector<tensor>& inputs,
                               const std::vector<tensor>& outputs) const {
  const attention_problem& a = problem_;
  execution run(*this, s);
  kernel_args args;
  // Without a mask the kernel does not read its mask argument: Q stands in.
  args.add(inputs[0].data).add(inputs[1].data).add(inputs[2].data).add(inputs[a.has_mask ? 3 : 0].data);
  args.add(outputs[0].data);
  args.add(std::int32_t(a.length)).add(std::int32_t(a.source)).add(std::int32_t(a.heads)).add(blocks_).add(a.scale);
  for (const auto* strides : {&a.q, &a.k, &a.v, &a.out}) {
    for (long st : *strides) args.add(std::int64_t{st});
  }
  for (long st : a.mask) args.add(std::int64_t{st});
  launch(*program_, s, args, launch_);
  run.finish();
}

}  // namespace unicache::gpu::detail
