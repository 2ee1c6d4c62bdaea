// The oneDNN CPU backend object: a kernel per partition kind, the device
// identity, the specialized kernels' classes and streams.
#include "backend.hpp"

#include <algorithm>
#include <array>
#include <bit>
#include <oneapi/dnnl/dnnl.hpp>

#include "attention_kernel.hpp"
#include "binary_kernel.hpp"
#include "chunked_matmul_kernel.hpp"
#include "engine_state.hpp"
#include "matmul_kernel.hpp"
#include "row_wise_kernel.hpp"
#include "transpose_kernel.hpp"
#include "unicache/cache_key.hpp"
#include "unicache/compiler.hpp"

namespace unicache::onednn_cpu::detail {

std::shared_ptr<const compiled_kernel> onednn_cpu_backend::compile(
    const partition& p, const std::vector<logical_tensor>& in, const std::vector<logical_tensor>& out,
    const engine& e, const std::vector<kernel_binary>& /*preloaded: oneDNN CPU kernels have no binaries*/) {
  try {
    switch (p.pattern()) {
      case partition::kind::fused_matmul: return std::make_shared<matmul_kernel>(p, in, out, e);
      case partition::kind::binary: return std::make_shared<binary_kernel>(p, in, out, e);
      case partition::kind::eltwise:
      case partition::kind::softmax:
      case partition::kind::layer_norm:
      case partition::kind::rms_norm: return std::make_shared<row_wise_kernel>(p, in, e);
      case partition::kind::transpose: return std::make_shared<transpose_kernel>(p, in);
      case partition::kind::attention: return std::make_shared<attention_kernel>(p, in);
    }
  } catch (const dnnl::error& err) {
    throw compile_error(std::string("onednn_cpu: oneDNN could not compile partition ") + p.fingerprint() + ": " +
                        err.what());
  }
  throw compile_error("onednn_cpu: unknown partition kind");
}

device_identity onednn_cpu_backend::identity(const engine& e) const {
  const dnnl_version_t* v = dnnl::version();
  return {"oneDNN", "cpu " + std::to_string(e.device_id()),
          "isa " + std::to_string(static_cast<int>(dnnl::get_effective_cpu_isa())),
          std::to_string(v->major) + "." + std::to_string(v->minor) + "." + std::to_string(v->patch) + " " + v->hash};
}

std::string onednn_cpu_backend::kernel_configuration(const partition& /*p*/,
                                                     const std::vector<std::vector<std::int64_t>>& input_shapes,
                                                     const engine& /*e*/) const {
  return shape_mode_configuration(current_kernel_shapes(), input_shapes);
}

shape_class onednn_cpu_backend::specialization_class(const partition& p, const std::vector<logical_tensor>& in,
                                                     const std::vector<logical_tensor>& /*out*/,
                                                     const engine& /*e*/) const {
  const std::int64_t m = chunkable_rows(p, in);
  if (m < kSmallestGranularity) return {};
  const std::int64_t rows = class_rows(m);
  const int bits = std::bit_width(static_cast<std::uint64_t>(m));
  const std::int64_t g = std::max<std::int64_t>(kSmallestGranularity, std::int64_t{1} << std::max(0, bits - 4));
  // The class's rows and everything but M decide the kernel.
  cache_key key;
  key.add("rows").add(rows).add(g);
  std::string description = "M " + std::to_string(rows) + ".." + std::to_string(rows + g - 1);
  for (std::size_t i = 0; i < in.size(); ++i) {
    auto shape = i == 1 ? std::array<std::int64_t, 2>{in[1].shape[0], in[1].shape[1]} : rows_columns(in[i].shape);
    if (i != 1 && shape[0] != 1) shape[0] = -1;  // M rows
    key.add(static_cast<std::uint64_t>(in[i].shape.size())).add(shape[0]).add(shape[1]);
  }
  description += " K " + std::to_string(in[0].shape.back()) + " N " +
                 std::to_string(in[1].shape[p.ops().front().transpose_b ? 0 : 1]);
  return {std::string(key.bytes()), description};
}

std::shared_ptr<const compiled_kernel> onednn_cpu_backend::specialize(const partition& p,
                                                                      const std::vector<logical_tensor>& in,
                                                                      const std::vector<logical_tensor>& out,
                                                                      const engine& e) {
  try {
    return std::make_shared<chunked_matmul_kernel>(p, in, out, e);
  } catch (const dnnl::error& err) {
    throw compile_error(std::string("onednn_cpu: oneDNN could not specialize partition ") + p.fingerprint() + ": " +
                        err.what());
  }
}

stream onednn_cpu_backend::make_stream(const engine& e) {
  auto s = std::make_shared<stream_state>();
  s->strm = dnnl::stream(e.native<engine_state>().eng);
  return stream(e, std::move(s));
}

}  // namespace unicache::onednn_cpu::detail
