// The specialized kernels' classes of M, and its kernel: the class's rows on a
// primitive made for them, the remaining rows on the runtime-dims primitive.
#include "chunked_matmul_kernel.hpp"

#include <algorithm>
#include <bit>
#include <unordered_map>
#include <utility>

#include "engine_state.hpp"
#include "unicache/cache_key.hpp"

namespace unicache::onednn_cpu::detail {

std::int64_t class_rows(std::int64_t m) {
  const int bits = std::bit_width(static_cast<std::uint64_t>(m));
  const std::int64_t g = std::max<std::int64_t>(kSmallestGranularity, std::int64_t{1} << std::max(0, bits - 4));
  return m / g * g;
}

std::array<std::int64_t, 2> rows_columns(const std::vector<std::int64_t>& shape) {
  if (shape.empty()) return {1, 1};
  return {shape.size() >= 2 ? shape[shape.size() - 2] : 1, shape.back()};
}

std::int64_t chunkable_rows(const partition& p, const std::vector<logical_tensor>& in) {
  if (p.pattern() != partition::kind::fused_matmul) return 0;
  const op& mm = p.ops().front();
  const auto& a = in[0].shape;
  if (mm.transpose_a || !in[1].is_constant() || in[1].shape.size() != 2) return 0;
  if (a.size() != 2 && !(a.size() == 3 && a[0] == 1)) return 0;
  for (std::size_t i = 2; i < in.size(); ++i) {
    const auto& operand = in[i].shape;
    if (operand.size() > 3 || (operand.size() == 3 && operand[0] != 1)) return 0;
  }
  return a[a.size() - 2];
}

chunked_matmul_kernel::chunked_matmul_kernel(const partition& p, const std::vector<logical_tensor>& in,
                                             const std::vector<logical_tensor>& out, const engine& e) {
  const std::int64_t m = chunkable_rows(p, in);
  const op& mm = p.ops().front();
  k_ = in[0].shape.back();
  n_ = out[0].shape.back();
  // B's logical dimensions are K x N; a transposed B is stored N x K (tag ba).
  b_user_md_ = dnnl::memory::desc({k_, n_}, dt::f32, mm.transpose_b ? tag::ba : tag::ab);
  std::size_t next_input = 2;
  for (std::size_t i = 1; i < p.ops().size(); ++i) {
    const op_kind kind = p.ops()[i].kind;
    post x{kind, 0, false};
    if (is_binary(kind)) {
      x.input = next_input++;
      const auto operand = rows_columns(in[x.input].shape);
      x.full_rows = operand[0] != 1;
      x.columns = operand[1];
    }
    posts_.push_back(x);
  }
  generic_ = {0, make(e, DNNL_RUNTIME_DIM_VAL), weights().make_slot()};
  const std::int64_t rows = class_rows(m);
  fixed_ = {rows, make(e, rows), weights().make_slot()};
}

void chunked_matmul_kernel::execute(stream& s, const std::vector<tensor>& inputs,
                                    const std::vector<tensor>& outputs) const {
  const std::vector<std::int64_t>& a = inputs[0].desc.shape;
  const std::int64_t m = a[a.size() - 2];
  run(s, inputs, outputs, fixed_, 0, fixed_.rows);
  if (fixed_.rows < m) run(s, inputs, outputs, generic_, fixed_.rows, m - fixed_.rows);
  s.native<stream_state>().strm.wait();
}

dnnl::memory::desc chunked_matmul_kernel::post_md(const post& x, std::int64_t rows) const {
  return {{x.full_rows ? rows : 1, x.columns}, dt::f32, tag::ab};
}

std::shared_ptr<const cached_primitive> chunked_matmul_kernel::make(const engine& e, std::int64_t rows) const {
  const dnnl::memory::desc a_md({rows, k_}, dt::f32, tag::ab), dst_md({rows, n_}, dt::f32, tag::ab);
  const dnnl::memory::desc b_any({k_, n_}, dt::f32, tag::any);
  std::vector<dnnl::memory::desc> post_mds;
  cache_key key;
  key.add("chunk-matmul");
  add_md(key, a_md);
  add_md(key, b_user_md_);
  add_md(key, dst_md);
  for (const post& x : posts_) {
    key.add(static_cast<std::uint8_t>(x.kind));
    post_mds.push_back(is_binary(x.kind) ? post_md(x, x.full_rows ? rows : 1) : dnnl::memory::desc());
    if (is_binary(x.kind)) add_md(key, post_mds.back());
  }
  return primitive_for(e, key, [&] {
    dnnl::post_ops ops;
    for (std::size_t i = 0; i < posts_.size(); ++i) {
      if (is_binary(posts_[i].kind)) {
        ops.append_binary(binary_algorithm(posts_[i].kind), post_mds[i]);
      } else {
        const eltwise_spec spec = eltwise_of(posts_[i].kind);
        ops.append_eltwise(1.f, spec.algorithm, spec.alpha, spec.beta);
      }
    }
    dnnl::primitive_attr attr = primitive_attributes();
    attr.set_post_ops(ops);
    const dnnl::engine& eng = e.native<engine_state>().eng;
    // The runtime-dims primitive takes the user's layout (what the generic kernel reads).
    const dnnl::memory::desc& b_md = rows == DNNL_RUNTIME_DIM_VAL ? b_user_md_ : b_any;
    dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a_md, b_md, dst_md), attr, eng);
    return cached_primitive{dnnl::matmul(pd), pd.weights_desc()};
  });
}

void chunked_matmul_kernel::run(stream& s, const std::vector<tensor>& inputs, const std::vector<tensor>& outputs,
                                const chunk& c, std::int64_t row, std::int64_t rows) const {
  const cached_primitive* prim = c.prim.get();
  const engine& e = s.get_engine();
  const dnnl::engine& eng = e.native<engine_state>().eng;
  dnnl::stream& strm = s.native<stream_state>().strm;
  auto at = [](const tensor& t, std::int64_t offset) { return static_cast<float*>(t.data) + offset; };
  dnnl::memory a({{rows, k_}, dt::f32, tag::ab}, eng, at(inputs[0], row * k_));
  dnnl::memory b = prim->weights_md != b_user_md_
                       ? packed_weight_memory(c.slot, e, strm, b_user_md_, prim->weights_md, inputs[1])
                       : dnnl::memory(b_user_md_, eng, inputs[1].data);
  dnnl::memory dst({{rows, n_}, dt::f32, tag::ab}, eng, at(outputs[0], row * n_));
  std::unordered_map<int, dnnl::memory> args{{DNNL_ARG_SRC, a}, {DNNL_ARG_WEIGHTS, b}, {DNNL_ARG_DST, dst}};
  for (std::size_t i = 0; i < posts_.size(); ++i) {
    const post& x = posts_[i];
    if (!is_binary(x.kind)) continue;
    args.emplace(DNNL_ARG_ATTR_MULTIPLE_POST_OP(static_cast<int>(i)) | DNNL_ARG_SRC_1,
                 dnnl::memory(post_md(x, rows), eng, at(inputs[x.input], x.full_rows ? row * x.columns : 0)));
  }
  run_primitive(prim->prim, strm, std::move(args));
}

}  // namespace unicache::onednn_cpu::detail
