// Constant weights reordered into the layout a primitive wants, kept in the
// constant tensor cache so each is packed once per engine and layout.
#pragma once

#include <memory>
#include <oneapi/dnnl/dnnl.hpp>

#include "unicache/constant_registry.hpp"
#include "unicache/onednn_cpu.hpp"

namespace unicache::onednn_cpu::detail {

struct packed_weight {
  dnnl::memory mem;
};

using weight_registry = constant_registry<packed_weight>;
using weight_slot = std::shared_ptr<weight_registry::slot>;

weight_registry& weights();

dnnl::memory packed_weight_memory(const weight_slot& slot, const engine& e, dnnl::stream& strm,
                                  const dnnl::memory::desc& user_md, const dnnl::memory::desc& packed_md,
                                  const tensor& t);

}  // namespace unicache::onednn_cpu::detail
