// The eltwise / Softmax / LayerNorm / RMSNorm kernel: one primitive per
// power-of-two block of rows, each from the kernel cache, run block after
// block; Softmax and RMSNorm run over every row in plain C++, with no primitive.
#include "row_wise_kernel.hpp"

#include <algorithm>
#include <bit>
#include <unordered_map>
#include <utility>

#include "engine_state.hpp"
#include "rms_norm_rows.hpp"
#include "softmax_rows.hpp"
#include "unicache/cache_key.hpp"

namespace unicache::onednn_cpu::detail {
namespace {

// A block holds at most this many elements (16 MiB of f32): large enough
// that a block's primitive runs at full speed, small enough that the
// largest block size is reached by few shapes.
constexpr std::int64_t kMaxBlockElements = std::int64_t{1} << 22;

cached_primitive make_primitive(op_kind k, const dnnl::memory::desc& md, float epsilon, const dnnl::engine& eng) {
  if (k == op_kind::layer_norm) {
    const auto flags = dnnl::normalization_flags::use_scale | dnnl::normalization_flags::use_shift;
    dnnl::layer_normalization_forward::primitive_desc pd(
        dnnl::layer_normalization_forward::desc(dnnl::prop_kind::forward_inference, md, epsilon, flags),
        primitive_attributes(), eng);
    return {dnnl::layer_normalization_forward(pd), {}};
  }
  const eltwise_spec spec = eltwise_of(k);
  dnnl::eltwise_forward::primitive_desc pd(
      dnnl::eltwise_forward::desc(dnnl::prop_kind::forward_inference, spec.algorithm, md, spec.alpha, spec.beta),
      primitive_attributes(), eng);
  return {dnnl::eltwise_forward(pd), {}};
}

}  // namespace

std::int64_t largest_block_rows(std::int64_t row_length) {
  return static_cast<std::int64_t>(
      std::bit_floor(static_cast<std::uint64_t>(std::max<std::int64_t>(1, kMaxBlockElements / row_length))));
}

std::vector<std::int64_t> power_of_two_blocks(std::int64_t rows, std::int64_t largest) {
  std::vector<std::int64_t> blocks;
  for (; rows >= largest; rows -= largest) blocks.push_back(largest);
  for (std::int64_t b = largest / 2; b > 0; b /= 2) {
    if (rows & b) blocks.push_back(b);
  }
  return blocks;
}

row_wise_kernel::row_wise_kernel(const partition& p, const std::vector<logical_tensor>& in, const engine& e)
    : layer_norm_(p.ops().front().kind == op_kind::layer_norm),
      softmax_(p.ops().front().kind == op_kind::softmax),
      rms_norm_(p.ops().front().kind == op_kind::rms_norm),
      epsilon_(p.ops().front().epsilon) {
  const op& o = p.ops().front();
  const std::vector<std::int64_t>& shape = in[0].shape;
  row_length_ = shape.empty() ? 1 : shape.back();
  for (std::size_t d = 0; d + 1 < shape.size(); ++d) rows_ *= shape[d];
  if (softmax_ || rms_norm_) return;
  parameter_md_ = plain_md({row_length_});
  const std::int64_t largest = largest_block_rows(row_length_);
  const dnnl::engine& eng = e.native<engine_state>().eng;
  const float epsilon = layer_norm_ ? o.epsilon : 0.f;
  for (std::int64_t block_rows : power_of_two_blocks(rows_, largest)) {
    block b{block_rows, plain_md({block_rows, row_length_}), nullptr};
    cache_key key;
    key.add("row_wise").add(static_cast<std::uint8_t>(o.kind)).add(std::bit_cast<std::uint32_t>(epsilon));
    add_md(key, b.md);
    b.prim = primitive_for(e, key, [&] { return make_primitive(o.kind, b.md, epsilon, eng); });
    blocks_.push_back(std::move(b));
  }
}

void row_wise_kernel::execute(stream& s, const std::vector<tensor>& inputs,
                              const std::vector<tensor>& outputs) const {
  if (softmax_) {
    softmax_rows(static_cast<const float*>(inputs[0].data), static_cast<float*>(outputs[0].data), rows_, row_length_);
    return;
  }
  if (rms_norm_) {
    rms_norm_rows(static_cast<const float*>(inputs[0].data), static_cast<const float*>(inputs[1].data),
                  static_cast<float*>(outputs[0].data), rows_, row_length_, epsilon_);
    return;
  }
  const dnnl::engine& eng = s.get_engine().native<engine_state>().eng;
  dnnl::stream& strm = s.native<stream_state>().strm;
  auto* src = static_cast<float*>(inputs[0].data);
  auto* dst = static_cast<float*>(outputs[0].data);
  for (const block& b : blocks_) {
    std::unordered_map<int, dnnl::memory> args{{DNNL_ARG_SRC, dnnl::memory(b.md, eng, src)},
                                               {DNNL_ARG_DST, dnnl::memory(b.md, eng, dst)}};
    if (layer_norm_) {
      args.emplace(DNNL_ARG_SCALE, dnnl::memory(parameter_md_, eng, inputs[1].data));
      args.emplace(DNNL_ARG_SHIFT, dnnl::memory(parameter_md_, eng, inputs[2].data));
    }
    run_primitive(b.prim->prim, strm, std::move(args));
    src += b.rows * row_length_;
    dst += b.rows * row_length_;
  }
  strm.wait();
}

}  // namespace unicache::onednn_cpu::detail
