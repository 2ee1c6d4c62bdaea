// The fused MatMul kernel: choosing fused, shape-agnostic or step-by-step
// primitives for a partition, and running them.
#include "matmul_kernel.hpp"

#include <unordered_map>
#include <utility>

#include "engine_state.hpp"
#include "row_wise_kernel.hpp"
#include "unicache/cache_key.hpp"

namespace unicache::onednn_cpu::detail {

matmul_kernel::matmul_kernel(const partition& p, const std::vector<logical_tensor>& in,
                             const std::vector<logical_tensor>& out, const engine& e)
    : slot_(weights().make_slot()) {
  const op& mm = p.ops().front();
  const auto& a = in[0].shape;
  auto b = in[1].shape;
  const std::size_t rank = out[0].shape.size();
  if (b.size() < rank) b = to_rank(b, rank);
  // A transposed operand is the logical (transposed) dims over the
  // stored bytes: the last two dims' strides swapped.
  const tag transposed = rank == 3 ? tag::acb : tag::ba;
  dims ad(a.begin(), a.end());
  if (mm.transpose_a) std::swap(ad[rank - 1], ad[rank - 2]);
  a_md_ = dnnl::memory::desc(ad, dt::f32, mm.transpose_a ? transposed : plain_tag(rank));
  dims bd(b.begin(), b.end());
  if (mm.transpose_b) std::swap(bd[rank - 1], bd[rank - 2]);
  b_user_md_ = dnnl::memory::desc(bd, dt::f32, mm.transpose_b ? transposed : plain_tag(rank));
  dst_md_ = plain_md(out[0].shape);
  constant_b_ = in[1].is_constant();
  transpose_a_ = mm.transpose_a;

  // Post-ops: the extra operand of each binary, in partition input order.
  std::size_t next_input = 2;
  std::vector<post> posts;
  for (std::size_t i = 1; i < p.ops().size(); ++i) {
    const op& o = p.ops()[i];
    post x{o.kind, 0, {}};
    if (is_binary(o.kind)) {
      x.input = next_input++;
      x.md = plain_md(to_rank(in[x.input].shape, rank));
    }
    posts.push_back(x);
  }
  // Try everything fused (shape-agnostic first, when asked); fall back to
  // the plain matmul plus steps.
  const kernel_shapes mode = current_kernel_shapes();
  if (shape_agnostic(mode)) {
    bool built = false, agnostic = false;
    try {
      prim_ = make_runtime_matmul(e, posts, &built);
      fused_ = posts;
      agnostic = true;
    } catch (const dnnl::error&) {
      agnostic = make_runtime_with_block_steps(e, posts, &built);
    }
    // Adaptive: the first shape of a configuration runs on a primitive of
    // its own, what is ready soonest (a runtime-dims primitive is slow on
    // its first executions); later shapes take the runtime-dims one.
    if (agnostic && !(mode == kernel_shapes::adaptive && built)) return;
    // Otherwise this configuration needs its shapes: build for them below.
    block_steps_.clear();
    own_shapes_ = true;  // below: a primitive for these shapes alone
  }
  try {
    prim_ = make_matmul(e, posts);
    fused_ = posts;
  } catch (const dnnl::error&) {
    prim_ = make_matmul(e, {});
    fused_.clear();
    for (const post& x : posts) steps_.push_back(make_step(e, x));
  }
}

void matmul_kernel::execute(stream& s, const std::vector<tensor>& inputs, const std::vector<tensor>& outputs) const {
  const engine& e = s.get_engine();
  const dnnl::engine& eng = e.native<engine_state>().eng;
  dnnl::stream& strm = s.native<stream_state>().strm;
  dnnl::memory a(a_md_, eng, inputs[0].data);
  dnnl::memory b = constant_b_ && prim_->weights_md != b_user_md_
                       ? packed_weight_memory(slot_, e, strm, b_user_md_, prim_->weights_md, inputs[1])
                       : dnnl::memory(b_user_md_, eng, inputs[1].data);
  dnnl::memory dst(dst_md_, eng, outputs[0].data);
  std::unordered_map<int, dnnl::memory> args{{DNNL_ARG_SRC, a}, {DNNL_ARG_WEIGHTS, b}, {DNNL_ARG_DST, dst}};
  for (std::size_t i = 0; i < fused_.size(); ++i) {
    if (is_binary(fused_[i].kind)) {
      args.emplace(DNNL_ARG_ATTR_MULTIPLE_POST_OP(static_cast<int>(i)) | DNNL_ARG_SRC_1,
                   dnnl::memory(fused_[i].md, eng, inputs[fused_[i].input].data));
    }
  }
  run_primitive(prim_->prim, strm, std::move(args));
  const std::int64_t n = dst_md_.dims().back();
  for (const block_step& st : block_steps_) {
    float* rows = static_cast<float*>(outputs[0].data) + st.first_row * n;
    std::unordered_map<int, dnnl::memory> step_args{{DNNL_ARG_DST, dnnl::memory(st.md, eng, rows)}};
    if (st.input) {
      float* operand = static_cast<float*>(inputs[*st.input].data) + (st.operand_whole ? st.first_row * n : 0);
      step_args.emplace(DNNL_ARG_SRC_0, dnnl::memory(st.md, eng, rows));
      step_args.emplace(DNNL_ARG_SRC_1, dnnl::memory(st.operand_md, eng, operand));
    } else {
      step_args.emplace(DNNL_ARG_SRC, dnnl::memory(st.md, eng, rows));
    }
    run_primitive(st.prim->prim, strm, std::move(step_args));
  }
  for (const step& st : steps_) {
    std::unordered_map<int, dnnl::memory> step_args{{DNNL_ARG_DST, dst}};
    if (st.input) {
      step_args.emplace(DNNL_ARG_SRC_0, dst);
      step_args.emplace(DNNL_ARG_SRC_1, dnnl::memory(st.operand_md, eng, inputs[*st.input].data));
    } else {
      step_args.emplace(DNNL_ARG_SRC, dst);
    }
    run_primitive(st.prim->prim, strm, std::move(step_args));
  }
  strm.wait();
}

std::shared_ptr<const cached_primitive> matmul_kernel::make_matmul(const engine& e, const std::vector<post>& posts) {
  std::vector<dnnl::memory::desc> post_mds;
  for (const post& x : posts) post_mds.push_back(x.md);
  return make_matmul(e, a_md_, dst_md_, posts, post_mds);
}

std::shared_ptr<const cached_primitive> matmul_kernel::make_runtime_matmul(const engine& e,
                                                                           const std::vector<post>& posts,
                                                                           bool* built) {
  const int rank = dst_md_.data.ndims;
  auto runtime = [rank](const dnnl::memory::desc& md, int keep, const dnnl::memory::dims& follows) {
    dims d = md.dims();
    for (int i = 0; i < rank; ++i) {
      if (i != keep && (follows.empty() || (d[i] != 1 && d[i] == follows[i]))) d[i] = DNNL_RUNTIME_DIM_VAL;
    }
    return d;
  };
  // A constant or rank-2 B keeps K and N (a weight's layout is chosen for
  // them); a variable batched one (attention's operands, whose K or N is the
  // sequence length) has every dim runtime.
  const bool batched_operands = !constant_b_ && rank == 3;
  const int keep = batched_operands ? -1 : rank - 1;
  const tag plain = plain_tag(static_cast<std::size_t>(rank));
  const tag transposed = rank == 3 ? tag::acb : tag::ba;
  const dnnl::memory::desc a(runtime(a_md_, keep, {}), dt::f32, transpose_a_ ? transposed : plain);
  const dnnl::memory::desc c(runtime(dst_md_, keep, {}), dt::f32, plain);
  std::vector<dnnl::memory::desc> post_mds;
  for (const post& x : posts) {
    post_mds.push_back(is_binary(x.kind) ? dnnl::memory::desc(runtime(x.md, keep, dst_md_.dims()), dt::f32, plain)
                                         : x.md);
  }
  const std::optional<dnnl::memory::desc> b =
      !batched_operands ? std::nullopt
                  : std::optional(dnnl::memory::desc(runtime(b_user_md_, keep, {}), dt::f32,
                                                     b_user_md_.data.format_desc.blocking.strides[rank - 1] == 1
                                                         ? plain
                                                         : transposed));
  return make_matmul(e, a, c, posts, post_mds, built, b);
}

std::shared_ptr<const cached_primitive> matmul_kernel::make_matmul(const engine& e, const dnnl::memory::desc& a_md,
                                                                   const dnnl::memory::desc& dst_md,
                                                                   const std::vector<post>& posts,
                                                                   const std::vector<dnnl::memory::desc>& post_mds,
                                                                   bool* built,
                                                                   const std::optional<dnnl::memory::desc>& b_runtime) {
  const dnnl::memory::desc b_any(b_user_md_.dims(), dt::f32, tag::any);
  const dnnl::memory::desc& b_md = b_runtime ? *b_runtime : constant_b_ ? b_any : b_user_md_;
  cache_key key;
  key.add("matmul");
  add_md(key, a_md);
  add_md(key, b_md);
  add_md(key, dst_md);
  for (std::size_t i = 0; i < posts.size(); ++i) {
    key.add(static_cast<std::uint8_t>(posts[i].kind));
    if (is_binary(posts[i].kind)) add_md(key, post_mds[i]);
  }
  return primitive_for(e, key, [&] {
    dnnl::post_ops ops;
    for (std::size_t i = 0; i < posts.size(); ++i) {
      const post& x = posts[i];
      if (is_binary(x.kind)) {
        ops.append_binary(binary_algorithm(x.kind), post_mds[i]);
      } else {
        const eltwise_spec spec = eltwise_of(x.kind);
        ops.append_eltwise(1.f, spec.algorithm, spec.alpha, spec.beta);
      }
    }
    dnnl::primitive_attr attr = primitive_attributes();
    attr.set_post_ops(ops);
    const dnnl::engine& eng = e.native<engine_state>().eng;
    dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a_md, b_md, dst_md), attr, eng);
    return cached_primitive{dnnl::matmul(pd), pd.weights_desc()};
  }, built);
}

matmul_kernel::step matmul_kernel::make_step(const engine& e, const post& x) {
  step st;
  cache_key key;
  key.add("step").add(static_cast<std::uint8_t>(x.kind));
  add_md(key, dst_md_);
  if (is_binary(x.kind)) {
    st.input = x.input;
    st.operand_md = x.md;
    add_md(key, x.md);
  }
  const dnnl::engine& eng = e.native<engine_state>().eng;
  st.prim = primitive_for(e, key, [&] {
    if (is_binary(x.kind)) {
      dnnl::binary::primitive_desc pd(dnnl::binary::desc(binary_algorithm(x.kind), dst_md_, x.md, dst_md_),
                                      primitive_attributes(), eng);
      return cached_primitive{dnnl::binary(pd), {}};
    }
    const eltwise_spec spec = eltwise_of(x.kind);
    dnnl::eltwise_forward::primitive_desc pd(
        dnnl::eltwise_forward::desc(dnnl::prop_kind::forward_inference, spec.algorithm, dst_md_, spec.alpha,
                                    spec.beta),
        primitive_attributes(), eng);
    return cached_primitive{dnnl::eltwise_forward(pd), {}};
  });
  return st;
}

bool matmul_kernel::make_runtime_with_block_steps(const engine& e, const std::vector<post>& posts, bool* built) {
  if (dst_md_.data.ndims != 2) return false;
  for (std::size_t fused = posts.size(); fused-- > 0;) {
    std::vector<block_step> steps;
    for (std::size_t i = fused; i < posts.size(); ++i) {
      std::vector<block_step> blocks = make_block_steps(e, posts[i]);
      if (blocks.empty()) return false;  // an operand neither whole nor one row
      steps.insert(steps.end(), blocks.begin(), blocks.end());
    }
    const std::vector<post> prefix(posts.begin(), posts.begin() + static_cast<std::ptrdiff_t>(fused));
    try {
      prim_ = make_runtime_matmul(e, prefix, built);
    } catch (const dnnl::error&) {
      continue;  // fuse fewer
    }
    fused_ = prefix;
    block_steps_ = std::move(steps);
    return true;
  }
  return false;
}

std::vector<matmul_kernel::block_step> matmul_kernel::make_block_steps(const engine& e, const post& x) const {
  const dims c = dst_md_.dims();
  const std::int64_t m = c[0], n = c[1];
  bool whole = false;
  if (is_binary(x.kind)) {
    const dims d = x.md.dims();
    whole = d[0] == m && d[1] == n;
    if (!whole && !(d[0] == 1 && d[1] == n)) return {};
  }
  const std::int64_t largest = largest_block_rows(n);
  const dnnl::engine& eng = e.native<engine_state>().eng;
  std::vector<block_step> steps;
  std::int64_t first = 0;
  for (std::int64_t rows : power_of_two_blocks(m, largest)) {
    block_step st;
    st.first_row = first;
    st.rows = rows;
    st.md = plain_md({rows, n});
    st.operand_whole = whole;
    if (is_binary(x.kind)) {
      st.input = x.input;
      st.operand_md = whole ? st.md : plain_md({1, n});
    }
    cache_key key;
    key.add("block_step").add(static_cast<std::uint8_t>(x.kind)).add(whole);
    add_md(key, st.md);
    st.prim = primitive_for(e, key, [&] {
      if (is_binary(x.kind)) {
        dnnl::binary::primitive_desc pd(dnnl::binary::desc(binary_algorithm(x.kind), st.md, st.operand_md, st.md),
                                        primitive_attributes(), eng);
        return cached_primitive{dnnl::binary(pd), {}};
      }
      const eltwise_spec spec = eltwise_of(x.kind);
      dnnl::eltwise_forward::primitive_desc pd(
          dnnl::eltwise_forward::desc(dnnl::prop_kind::forward_inference, spec.algorithm, st.md, spec.alpha,
                                      spec.beta),
          primitive_attributes(), eng);
      return cached_primitive{dnnl::eltwise_forward(pd), {}};
    });
    steps.push_back(std::move(st));
    first += rows;
  }
  return steps;
}

}  // namespace unicache::onednn_cpu::detail
