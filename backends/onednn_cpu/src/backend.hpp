// The oneDNN CPU backend object: what the core calls to compile and
// specialize partitions, name the device and make streams.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "unicache/onednn_cpu.hpp"

namespace unicache::onednn_cpu::detail {

class onednn_cpu_backend final : public backend {
 public:
  const char* name() const override { return "onednn_cpu"; }
  engine_kind kind() const override { return engine_kind::cpu; }
  owner_id cache_owner() const override { return cache_owner_id; }

  std::shared_ptr<const compiled_kernel> compile(const partition& p, const std::vector<logical_tensor>& in,
                                                 const std::vector<logical_tensor>& out, const engine& e,
                                                 const std::vector<kernel_binary>& /*preloaded: oneDNN CPU kernels have no binaries*/) override;

  device_identity identity(const engine& e) const override;

  // oneDNN CPU kernels have no binaries to put in a blob; the in-memory
  // compiled-partition key adds the full shapes to this.
  std::string kernel_configuration(const partition& /*p*/, const std::vector<std::vector<std::int64_t>>& input_shapes,
                                   const engine& /*e*/) const override;

  shape_class specialization_class(const partition& p, const std::vector<logical_tensor>& in,
                                   const std::vector<logical_tensor>& /*out*/, const engine& /*e*/) const override;

  // Runs on a background thread of the specializer's arena, with the process's
  // OpenMP settings: oneDNN bakes the thread count into a primitive when it
  // creates it, so these primitives run on every core like the callers'.
  std::shared_ptr<const compiled_kernel> specialize(const partition& p, const std::vector<logical_tensor>& in,
                                                    const std::vector<logical_tensor>& out, const engine& e) override;

  stream make_stream(const engine& e) override;
};

}  // namespace unicache::onednn_cpu::detail
