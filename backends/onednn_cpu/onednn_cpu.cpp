#include "unicache/onednn_cpu.hpp"

#include <array>
#include <atomic>
#include <bit>
#include <chrono>
#include <cmath>
#include <mutex>
#include <optional>
#include <oneapi/dnnl/dnnl.hpp>
#include <string>
#include <unordered_map>
#include <vector>

#include "unicache/cache_key.hpp"
#include "unicache/compiler.hpp"
#include "unicache/constant_registry.hpp"

namespace unicache::onednn_cpu {
namespace {

using dims = dnnl::memory::dims;
using tag = dnnl::memory::format_tag;
using dt = dnnl::memory::data_type;

// What a primitive holds (its JIT code and tables), which oneDNN does not
// report: measured once (benchmarks/onednn_primitive_bytes) as the
// resident-memory growth of 200 primitives held at once (oneDNN 2.6, the
// 2-core AMD EPYC dev VM, its primitive cache off), per kind. A matmul for one shape (brgemm: BERT-layer shapes with
// bias and GELU) 300 KB; with runtime dimensions (gemm:jit) 49 KB; an
// eltwise 28 KB. Counted once a primitive is built; the kernel cache then
// holds at most its capacity of them.
constexpr std::size_t kShapeMatmulBytes = 300 * 1024;
constexpr std::size_t kRuntimeMatmulBytes = 49 * 1024;
constexpr std::size_t kOtherPrimitiveBytes = 28 * 1024;
constexpr std::size_t kPrimitiveBytesEstimate = kShapeMatmulBytes;  // before it is built

struct counters {
  std::atomic<std::uint64_t> primitives_created{0}, create_ns{0}, weights_packed{0}, pack_ns{0};
};
counters& stats_counters() {
  static counters c;
  return c;
}
std::uint64_t ns_since(std::chrono::steady_clock::time_point start) {
  return static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start).count());
}

struct engine_state {
  dnnl::engine eng;
};
struct stream_state {
  dnnl::stream strm;
};

tag plain_tag(std::size_t rank) {
  switch (rank) {
    case 1: return tag::a;
    case 2: return tag::ab;
    case 3: return tag::abc;
    case 4: return tag::abcd;
    case 5: return tag::abcde;
    default: throw compile_error("onednn_cpu: tensors of rank " + std::to_string(rank) + " are not supported");
  }
}

dnnl::memory::desc plain_md(const std::vector<std::int64_t>& shape) {
  return {dims(shape.begin(), shape.end()), dt::f32, plain_tag(shape.size())};
}


dnnl::algorithm eltwise_algorithm(op_kind k) {
  switch (k) {
    case op_kind::relu: return dnnl::algorithm::eltwise_relu;
    case op_kind::gelu_erf: return dnnl::algorithm::eltwise_gelu_erf;
    case op_kind::gelu_tanh: return dnnl::algorithm::eltwise_gelu_tanh;
    case op_kind::sigmoid: return dnnl::algorithm::eltwise_logistic;
    case op_kind::tanh: return dnnl::algorithm::eltwise_tanh;
    default: throw compile_error(std::string("onednn_cpu: ") + to_string(k) + " is not an eltwise op");
  }
}
dnnl::algorithm binary_algorithm(op_kind k) {
  return k == op_kind::add ? dnnl::algorithm::binary_add : dnnl::algorithm::binary_mul;
}

void add_md(cache_key& key, const dnnl::memory::desc& md) {
  key.add(std::string_view(reinterpret_cast<const char*>(&md.data), sizeof md.data));
}

// A primitive in the kernel cache, with the descriptor facts execution needs.
struct cached_primitive {
  dnnl::primitive prim;
  dnnl::memory::desc weights_md;  // matmul: the layout the primitive wants B in

  // What the kernel cache counts for it (the measured sizes above).
  std::size_t cached_bytes() const {
    if (!prim || prim.get_kind() != dnnl::primitive::kind::matmul) return kOtherPrimitiveBytes;
    const dnnl_memory_desc_t* src = dnnl_primitive_desc_query_md(prim.get_primitive_desc(), dnnl_query_src_md, 0);
    for (int i = 0; src && i < src->ndims; ++i) {
      if (src->dims[i] == DNNL_RUNTIME_DIM_VAL) return kRuntimeMatmulBytes;
    }
    return kShapeMatmulBytes;
  }
};

// The primitive under `key`, made by `make` on a miss; `*built` (if given)
// tells whether this call made it.
template <typename MakePrimitive>
std::shared_ptr<const cached_primitive> primitive_for(const engine& e, const cache_key& key, MakePrimitive make,
                                                      bool* built = nullptr) {
  // A hit borrows and takes the one reference it keeps; a miss builds.
  if (auto hit = kernel_cache().lookup<const cached_primitive>(e.scope(), backend_id_value, key.bytes())) {
    return hit.shared_value();
  }
  return kernel_cache()
      .get_or_build<const cached_primitive>(e.scope(), backend_id_value, key.bytes(), kPrimitiveBytesEstimate,
                                            [&] {
                                              if (built) *built = true;
                                              const auto start = std::chrono::steady_clock::now();
                                              auto made = std::make_shared<const cached_primitive>(make());
                                              counters& c = stats_counters();
                                              c.primitives_created.fetch_add(1, std::memory_order_relaxed);
                                              c.create_ns.fetch_add(ns_since(start), std::memory_order_relaxed);
                                              return made;
                                            })
      .value();
}

// --- Constant weights -------------------------------------------------------

struct packed_weight {
  dnnl::memory mem;
};

using weight_registry = constant_registry<packed_weight>;
using weight_slot = std::shared_ptr<weight_registry::slot>;

weight_registry& weights() {
  static weight_registry* const r = new weight_registry(constant_tensor_cache(), backend_id_value);
  return *r;
}

dnnl::memory packed_weight_memory(const weight_slot& slot, const engine& e, dnnl::stream& strm,
                                  const dnnl::memory::desc& user_md, const dnnl::memory::desc& packed_md,
                                  const tensor& t) {
  cache_key layout;
  layout.add("packed-weight");
  add_md(layout, user_md);
  add_md(layout, packed_md);
  const dnnl::engine& eng = e.native<engine_state>().eng;
  return weights()
      .get(slot, e.scope(), {t.data, t.version, user_md.get_size()}, layout, packed_md.get_size(),
           host_memory_reader{t.data}, [&] {
             const auto start = std::chrono::steady_clock::now();
             auto p = std::make_shared<packed_weight>();
             p->mem = dnnl::memory(packed_md, eng);
             dnnl::memory user(user_md, eng, t.data);
             dnnl::reorder(user, p->mem).execute(strm, user, p->mem);
             strm.wait();
             counters& c = stats_counters();
             c.weights_packed.fetch_add(1, std::memory_order_relaxed);
             c.pack_ns.fetch_add(ns_since(start), std::memory_order_relaxed);
             return p;
           })
      ->mem;
}

// --- Kernels ----------------------------------------------------------------

// MatMul -> (Add|Multiply)* -> eltwise*: one matmul with post-ops, or, if
// this oneDNN cannot fuse a post-op's broadcast, a matmul followed by one
// primitive per remaining op, applied in place on the output.
//
// With a shape-agnostic mode (tiered, agnostic) the fused matmul is created with every dim
// but K and N as DNNL_RUNTIME_DIM_VAL, so one primitive serves every M and
// batch; the tensors' real dims are given at execution. Where oneDNN
// refuses runtime dims for a configuration, the kernel falls back to a
// primitive for this shape.
class matmul_kernel final : public compiled_kernel {
 public:
  matmul_kernel(const partition& p, const std::vector<logical_tensor>& in,
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
      try {
        bool built = false;
        prim_ = make_runtime_matmul(e, posts, &built);
        fused_ = posts;
        // Tiered: the first shape of a configuration runs on a primitive of
        // its own, what is ready soonest (a runtime-dims primitive is slow on
        // its first executions); later shapes take the runtime-dims one.
        if (!(mode == kernel_shapes::tiered && built)) return;
      } catch (const dnnl::error&) {
        // This configuration needs its shapes: build for them below.
      }
      own_shapes_ = true;  // below: a primitive for these shapes alone
    }
    try {
      prim_ = make_matmul(e, posts);
      fused_ = posts;
    } catch (const dnnl::error&) {
      prim_ = make_matmul(e, {});
      for (const post& x : posts) steps_.push_back(make_step(e, x));
    }
  }

  // Tiered mode's first shape of a configuration: a primitive for exactly
  // that shape, which no class's kernel would beat.
  bool built_for_its_shapes() const override { return own_shapes_; }

  void execute(stream& s, const std::vector<tensor>& inputs, const std::vector<tensor>& outputs) const override {
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
    prim_->prim.execute(strm, args);
    for (const step& st : steps_) {
      std::unordered_map<int, dnnl::memory> step_args{{DNNL_ARG_DST, dst}};
      if (st.input) {
        step_args.emplace(DNNL_ARG_SRC_0, dst);
        step_args.emplace(DNNL_ARG_SRC_1, dnnl::memory(st.operand_md, eng, inputs[*st.input].data));
      } else {
        step_args.emplace(DNNL_ARG_SRC, dst);
      }
      st.prim->prim.execute(strm, step_args);
    }
    strm.wait();
  }

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

  std::shared_ptr<const cached_primitive> make_matmul(const engine& e, const std::vector<post>& posts) {
    std::vector<dnnl::memory::desc> post_mds;
    for (const post& x : posts) post_mds.push_back(x.md);
    return make_matmul(e, a_md_, dst_md_, posts, post_mds);
  }

  // The same matmul with every dim but K (of A) and N (of C) a runtime dim,
  // and a post-op operand's dims runtime wherever they follow C's.
  std::shared_ptr<const cached_primitive> make_runtime_matmul(const engine& e, const std::vector<post>& posts,
                                                              bool* built) {
    const int rank = dst_md_.data.ndims;
    auto runtime = [rank](const dnnl::memory::desc& md, int keep, const dnnl::memory::dims& follows) {
      dims d = md.dims();
      for (int i = 0; i < rank; ++i) {
        if (i != keep && (follows.empty() || (d[i] != 1 && d[i] == follows[i]))) d[i] = DNNL_RUNTIME_DIM_VAL;
      }
      return d;
    };
    const tag plain = plain_tag(static_cast<std::size_t>(rank));
    const dnnl::memory::desc a(runtime(a_md_, rank - 1, {}), dt::f32,
                               transpose_a_ ? (rank == 3 ? tag::acb : tag::ba) : plain);
    const dnnl::memory::desc c(runtime(dst_md_, rank - 1, {}), dt::f32, plain);
    std::vector<dnnl::memory::desc> post_mds;
    for (const post& x : posts) {
      post_mds.push_back(is_binary(x.kind) ? dnnl::memory::desc(runtime(x.md, rank - 1, dst_md_.dims()), dt::f32, plain)
                                           : x.md);
    }
    return make_matmul(e, a, c, posts, post_mds, built);
  }

  std::shared_ptr<const cached_primitive> make_matmul(const engine& e, const dnnl::memory::desc& a_md,
                                                      const dnnl::memory::desc& dst_md, const std::vector<post>& posts,
                                                      const std::vector<dnnl::memory::desc>& post_mds,
                                                      bool* built = nullptr) {
    const dnnl::memory::desc b_any(b_user_md_.dims(), dt::f32, tag::any);
    const dnnl::memory::desc& b_md = constant_b_ ? b_any : b_user_md_;
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
          ops.append_eltwise(1.f, eltwise_algorithm(x.kind), 0.f, 0.f);
        }
      }
      dnnl::primitive_attr attr;
      attr.set_post_ops(ops);
      const dnnl::engine& eng = e.native<engine_state>().eng;
      dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a_md, b_md, dst_md), attr, eng);
      return cached_primitive{dnnl::matmul(pd), pd.weights_desc()};
    }, built);
  }

  step make_step(const engine& e, const post& x) {
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
        dnnl::binary::primitive_desc pd(dnnl::binary::desc(binary_algorithm(x.kind), dst_md_, x.md, dst_md_), eng);
        return cached_primitive{dnnl::binary(pd), {}};
      }
      dnnl::eltwise_forward::primitive_desc pd(
          dnnl::eltwise_forward::desc(dnnl::prop_kind::forward_inference, eltwise_algorithm(x.kind), dst_md_, 0.f, 0.f),
          eng);
      return cached_primitive{dnnl::eltwise_forward(pd), {}};
    });
    return st;
  }

  dnnl::memory::desc a_md_, b_user_md_, dst_md_;
  bool constant_b_ = false, transpose_a_ = false;
  bool own_shapes_ = false;  // tiered, a configuration's first shape: a primitive for it alone
  std::shared_ptr<const cached_primitive> prim_;
  std::vector<post> fused_;
  std::vector<step> steps_;
  weight_slot slot_;
};

// --- The specialized tier (kernel_shapes::tiered) ----------------------------------
//
// A class is a fused MatMul of a plain row-major A (rank 2, or rank 3 with a
// batch of 1) with a constant rank-2 weight and M >= 16, with M in
// [q g, (q + 1) g) where the granularity g is 1/16 of M's power of two (at
// least 16 rows): eight classes per octave of M, M rounded down by less than
// an eighth. Its kernel is one primitive created for exactly q g rows, with
// the weight in the layout it picks (oneDNN's brgemm kernels, weights packed
// once into the constant tensor cache); any M of the class runs its first
// q g rows there and the rest (fewer than g) on the generic runtime-dims
// primitive (rows of a row-major A and C are contiguous). A post-op operand
// with M rows is offset with the rows; one broadcast over rows is passed as is.

constexpr std::int64_t kSmallestGranularity = 16;

// The rows of M's class's primitive (q g above).
std::int64_t class_rows(std::int64_t m) {
  const int bits = std::bit_width(static_cast<std::uint64_t>(m));
  const std::int64_t g = std::max<std::int64_t>(kSmallestGranularity, std::int64_t{1} << std::max(0, bits - 4));
  return m / g * g;
}

// A tensor of rank <= 3 seen as rows x columns (a leading batch must be 1).
std::array<std::int64_t, 2> rows_columns(const std::vector<std::int64_t>& shape) {
  if (shape.empty()) return {1, 1};
  return {shape.size() >= 2 ? shape[shape.size() - 2] : 1, shape.back()};
}

// The rows of a matmul partition's A, if the specialized tier can chunk it: 0 otherwise.
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

class chunked_matmul_kernel final : public compiled_kernel {
 public:
  chunked_matmul_kernel(const partition& p, const std::vector<logical_tensor>& in, const std::vector<logical_tensor>& out,
                        const engine& e) {
    const std::int64_t m = chunkable_rows(p, in);
    const op& mm = p.ops().front();
    k_ = in[0].shape.back();
    n_ = out[0].shape.back();
    b_user_md_ = dnnl::memory::desc({in[1].shape[0], in[1].shape[1]}, dt::f32, mm.transpose_b ? tag::ba : tag::ab);
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

  void execute(stream& s, const std::vector<tensor>& inputs, const std::vector<tensor>& outputs) const override {
    const std::vector<std::int64_t>& a = inputs[0].desc.shape;
    const std::int64_t m = a[a.size() - 2];
    run(s, inputs, outputs, fixed_, 0, fixed_.rows);
    if (fixed_.rows < m) run(s, inputs, outputs, generic_, fixed_.rows, m - fixed_.rows);
    s.native<stream_state>().strm.wait();
  }

 private:
  struct post {
    op_kind kind;
    std::size_t input;
    bool full_rows;  // one value per row of C (offset with each chunk), else broadcast over rows
    std::int64_t columns = 1;
  };
  struct chunk {
    std::int64_t rows = 0;  // 0: any (the runtime-dims primitive)
    std::shared_ptr<const cached_primitive> prim;
    weight_slot slot;  // per primitive: each may want its own layout
  };

  dnnl::memory::desc post_md(const post& x, std::int64_t rows) const {
    return {{x.full_rows ? rows : 1, x.columns}, dt::f32, tag::ab};
  }

  // A fused matmul primitive for `rows` rows (DNNL_RUNTIME_DIM_VAL: any).
  std::shared_ptr<const cached_primitive> make(const engine& e, std::int64_t rows) const {
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
          ops.append_eltwise(1.f, eltwise_algorithm(posts_[i].kind), 0.f, 0.f);
        }
      }
      dnnl::primitive_attr attr;
      attr.set_post_ops(ops);
      const dnnl::engine& eng = e.native<engine_state>().eng;
      // The runtime-dims primitive takes the user's layout (what the generic kernel reads).
      const dnnl::memory::desc& b_md = rows == DNNL_RUNTIME_DIM_VAL ? b_user_md_ : b_any;
      dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a_md, b_md, dst_md), attr, eng);
      return cached_primitive{dnnl::matmul(pd), pd.weights_desc()};
    });
  }

  void run(stream& s, const std::vector<tensor>& inputs, const std::vector<tensor>& outputs,
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
    prim->prim.execute(strm, args);
  }

  std::int64_t k_ = 0, n_ = 0;
  dnnl::memory::desc b_user_md_;
  std::vector<post> posts_;
  chunk generic_;
  chunk fixed_;  // the class's rows
};

// Add / Multiply with numpy broadcasting. oneDNN broadcasts its second
// source only, so a broadcast first operand is swapped (both ops commute);
// when both operands broadcast, a plain loop does it.
class binary_kernel final : public compiled_kernel {
 public:
  binary_kernel(const partition& p, const std::vector<logical_tensor>& in, const std::vector<logical_tensor>& out,
                const engine& e)
      : kind_(p.ops().front().kind), out_shape_(out[0].shape) {
    const std::size_t rank = out_shape_.size();
    shapes_[0] = to_rank(in[0].shape, rank);
    shapes_[1] = to_rank(in[1].shape, rank);
    if (shapes_[0] != out_shape_) {
      std::swap(shapes_[0], shapes_[1]);
      swapped_ = true;
    }
    if (shapes_[0] != out_shape_) {  // both broadcast
      loop_ = true;
      return;
    }
    const auto m0 = plain_md(shapes_[0]), m1 = plain_md(shapes_[1]), md = plain_md(out_shape_);
    cache_key key;
    key.add("binary").add(static_cast<std::uint8_t>(kind_));
    add_md(key, m0);
    add_md(key, m1);
    const dnnl::engine& eng = e.native<engine_state>().eng;
    prim_ = primitive_for(e, key, [&] {
      dnnl::binary::primitive_desc pd(dnnl::binary::desc(binary_algorithm(kind_), m0, m1, md), eng);
      return cached_primitive{dnnl::binary(pd), {}};
    });
  }

  void execute(stream& s, const std::vector<tensor>& inputs, const std::vector<tensor>& outputs) const override {
    const void* x = inputs[swapped_ ? 1 : 0].data;
    const void* y = inputs[swapped_ ? 0 : 1].data;
    if (loop_) {
      broadcast_loop(static_cast<const float*>(x), static_cast<const float*>(y), static_cast<float*>(outputs[0].data));
      return;
    }
    const dnnl::engine& eng = s.get_engine().native<engine_state>().eng;
    dnnl::stream& strm = s.native<stream_state>().strm;
    prim_->prim.execute(strm, {{DNNL_ARG_SRC_0, dnnl::memory(plain_md(shapes_[0]), eng, const_cast<void*>(x))},
                               {DNNL_ARG_SRC_1, dnnl::memory(plain_md(shapes_[1]), eng, const_cast<void*>(y))},
                               {DNNL_ARG_DST, dnnl::memory(plain_md(out_shape_), eng, outputs[0].data)}});
    strm.wait();
  }

 private:
  void broadcast_loop(const float* x, const float* y, float* out) const {
    const std::size_t rank = out_shape_.size();
    std::int64_t total = 1;
    for (std::int64_t d : out_shape_) total *= d;
    std::vector<std::int64_t> idx(rank, 0);
    for (std::int64_t flat = 0; flat < total; ++flat) {
      std::int64_t ox = 0, oy = 0;
      for (std::size_t d = 0; d < rank; ++d) {
        ox = ox * shapes_[0][d] + (shapes_[0][d] == 1 ? 0 : idx[d]);
        oy = oy * shapes_[1][d] + (shapes_[1][d] == 1 ? 0 : idx[d]);
      }
      out[flat] = kind_ == op_kind::add ? x[ox] + y[oy] : x[ox] * y[oy];
      for (std::size_t d = rank; d-- > 0;) {
        if (++idx[d] < out_shape_[d]) break;
        idx[d] = 0;
      }
    }
  }

  op_kind kind_;
  std::vector<std::int64_t> out_shape_;
  std::vector<std::int64_t> shapes_[2];
  bool swapped_ = false, loop_ = false;
  std::shared_ptr<const cached_primitive> prim_;
};

// ReLU, GELU, Sigmoid, Tanh, Softmax (last axis): one primitive, SRC -> DST.
class unary_kernel final : public compiled_kernel {
 public:
  unary_kernel(const partition& p, const std::vector<logical_tensor>& in, const engine& e) : md_(plain_md(in[0].shape)) {
    const op_kind k = p.ops().front().kind;
    cache_key key;
    key.add("unary").add(static_cast<std::uint8_t>(k));
    add_md(key, md_);
    const dnnl::engine& eng = e.native<engine_state>().eng;
    prim_ = primitive_for(e, key, [&] {
      if (k == op_kind::softmax) {
        const int axis = static_cast<int>(in[0].shape.size()) - 1;
        dnnl::softmax_forward::primitive_desc pd(
            dnnl::softmax_forward::desc(dnnl::prop_kind::forward_inference, md_, axis), eng);
        return cached_primitive{dnnl::softmax_forward(pd), {}};
      }
      dnnl::eltwise_forward::primitive_desc pd(
          dnnl::eltwise_forward::desc(dnnl::prop_kind::forward_inference, eltwise_algorithm(k), md_, 0.f, 0.f), eng);
      return cached_primitive{dnnl::eltwise_forward(pd), {}};
    });
  }

  void execute(stream& s, const std::vector<tensor>& inputs, const std::vector<tensor>& outputs) const override {
    const dnnl::engine& eng = s.get_engine().native<engine_state>().eng;
    dnnl::stream& strm = s.native<stream_state>().strm;
    prim_->prim.execute(strm, {{DNNL_ARG_SRC, dnnl::memory(md_, eng, inputs[0].data)},
                               {DNNL_ARG_DST, dnnl::memory(md_, eng, outputs[0].data)}});
    strm.wait();
  }

 private:
  dnnl::memory::desc md_;
  std::shared_ptr<const cached_primitive> prim_;
};

class onednn_cpu_backend final : public backend {
 public:
  const char* name() const override { return "onednn_cpu"; }
  engine_kind kind() const override { return engine_kind::cpu; }

  std::shared_ptr<const compiled_kernel> compile(const partition& p, const std::vector<logical_tensor>& in,
                                                 const std::vector<logical_tensor>& out, const engine& e,
                                                 const std::vector<kernel_binary>& /*preloaded: oneDNN CPU kernels have no binaries*/) override {
    try {
      switch (p.pattern()) {
        case partition::kind::fused_matmul: return std::make_shared<matmul_kernel>(p, in, out, e);
        case partition::kind::binary: return std::make_shared<binary_kernel>(p, in, out, e);
        case partition::kind::eltwise:
        case partition::kind::softmax: return std::make_shared<unary_kernel>(p, in, e);
      }
    } catch (const dnnl::error& err) {
      throw compile_error(std::string("onednn_cpu: oneDNN could not compile partition ") + p.fingerprint() + ": " +
                          err.what());
    }
    throw compile_error("onednn_cpu: unknown partition kind");
  }

  device_identity identity(const engine& e) const override {
    const dnnl_version_t* v = dnnl::version();
    return {"oneDNN", "cpu " + std::to_string(e.device_id()),
            "isa " + std::to_string(static_cast<int>(dnnl::get_effective_cpu_isa())),
            std::to_string(v->major) + "." + std::to_string(v->minor) + "." + std::to_string(v->patch) + " " + v->hash};
  }

  // oneDNN CPU kernels have no binaries to put in a blob; the in-memory
  // compiled-partition key adds the full shapes to this.
  std::string kernel_configuration(const partition& /*p*/, const std::vector<std::vector<std::int64_t>>& input_shapes,
                                   const engine& /*e*/) const override {
    return shape_mode_configuration(current_kernel_shapes(), input_shapes);
  }

  shape_class specialization_class(const partition& p, const std::vector<logical_tensor>& in,
                                   const std::vector<logical_tensor>& /*out*/, const engine& /*e*/) const override {
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

  // Runs on a background thread of the tiers' arena, with the process's
  // OpenMP settings: oneDNN bakes the thread count into a primitive when it
  // creates it, so these primitives run on every core like the callers'.
  std::shared_ptr<const compiled_kernel> specialize(const partition& p, const std::vector<logical_tensor>& in,
                                                    const std::vector<logical_tensor>& out, const engine& e) override {
    try {
      return std::make_shared<chunked_matmul_kernel>(p, in, out, e);
    } catch (const dnnl::error& err) {
      throw compile_error(std::string("onednn_cpu: oneDNN could not specialize partition ") + p.fingerprint() + ": " +
                          err.what());
    }
  }

  stream make_stream(const engine& e) override {
    auto s = std::make_shared<stream_state>();
    s->strm = dnnl::stream(e.native<engine_state>().eng);
    return stream(e, std::move(s));
  }
};

}  // namespace

backend_stats stats() {
  const counters& c = stats_counters();
  return {c.primitives_created.load(), c.create_ns.load(), c.weights_packed.load(), c.pack_ns.load()};
}

engine make_engine(int index) {
  static onednn_cpu_backend* const b = [] {
    auto* created = new onednn_cpu_backend();
    register_backend(created);
    register_backend_id(backend_id_value, created->name());
    weights();  // registers the eviction callback
    return created;
  }();
  // One dnnl::engine per device index for the whole process: cached
  // primitives and packed weights belong to the engine that made them, and
  // the cache scope (cpu, index, 0) must always mean that same engine.
  static std::mutex mu;
  static auto* engines = new std::unordered_map<int, std::shared_ptr<engine_state>>();
  std::lock_guard lock(mu);
  auto& state = (*engines)[index];
  if (!state) {
    try {
      auto created = std::make_shared<engine_state>();
      created->eng = dnnl::engine(dnnl::engine::kind::cpu, static_cast<std::size_t>(index));
      state = std::move(created);
    } catch (const dnnl::error& err) {
      engines->erase(index);
      throw compile_error(std::string("onednn_cpu: no CPU engine ") + std::to_string(index) + ": " + err.what());
    }
  }
  return engine(b, index, /*context_id=*/0, state);
}

}  // namespace unicache::onednn_cpu
