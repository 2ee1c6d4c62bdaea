// Plain memory descriptors, the op-to-algorithm maps, the cached primitive's
// size, and the backend's counters with onednn_cpu::stats() reading them.
#include "primitives.hpp"

#include <cstdlib>
#include <string>

#include "unicache/compiler.hpp"

namespace unicache::onednn_cpu {
namespace detail {

counters& stats_counters() {
  static counters c;
  return c;
}
std::uint64_t ns_since(std::chrono::steady_clock::time_point start) {
  return static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start).count());
}

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


eltwise_spec eltwise_of(op_kind k) {
  using alg = dnnl::algorithm;
  switch (k) {
    case op_kind::relu: return {alg::eltwise_relu, 0.f, 0.f};
    case op_kind::gelu_erf: return {alg::eltwise_gelu_erf, 0.f, 0.f};
    case op_kind::gelu_tanh: return {alg::eltwise_gelu_tanh, 0.f, 0.f};
    case op_kind::sigmoid: return {alg::eltwise_logistic, 0.f, 0.f};
    case op_kind::tanh: return {alg::eltwise_tanh, 0.f, 0.f};
    case op_kind::sqrt: return {alg::eltwise_sqrt, 0.f, 0.f};
    case op_kind::rsqrt: return {alg::eltwise_pow, 1.f, -0.5f};  // alpha * x^beta
    case op_kind::silu: return {alg::eltwise_swish, 1.f, 0.f};   // x * sigmoid(alpha * x)
    default: throw compile_error(std::string("onednn_cpu: ") + to_string(k) + " is not an eltwise op");
  }
}
dnnl::algorithm binary_algorithm(op_kind k) {
  return k == op_kind::add ? dnnl::algorithm::binary_add : dnnl::algorithm::binary_mul;
}

void add_md(cache_key& key, const dnnl::memory::desc& md) {
  key.add(std::string_view(reinterpret_cast<const char*>(&md.data), sizeof md.data));
}

dnnl::primitive_attr primitive_attributes() {
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  return attr;
}

namespace {

// A thread's scratchpad: one buffer grown to the largest a primitive run on
// this thread has asked for, kept until the thread ends. A CPU primitive's
// execution returns finished, and a thread runs one at a time.
class scratch_buffer {
 public:
  void* at_least(std::size_t bytes) {
    if (bytes > size_) {
      data_.reset();
      size_ = 0;
      const std::size_t rounded = (bytes + kAlign - 1) / kAlign * kAlign;
      data_.reset(std::aligned_alloc(kAlign, rounded));
      if (!data_) {
        throw execute_error("onednn_cpu: cannot allocate a scratchpad of " + std::to_string(rounded) + " bytes");
      }
      size_ = rounded;
    }
    return data_.get();
  }

 private:
  static constexpr std::size_t kAlign = 4096;
  struct release {
    void operator()(void* p) const noexcept { std::free(p); }
  };
  std::unique_ptr<void, release> data_;
  std::size_t size_ = 0;
};

}  // namespace

void run_primitive(const dnnl::primitive& p, dnnl::stream& strm, std::unordered_map<int, dnnl::memory> args) {
  const dnnl_memory_desc_t* md = dnnl_primitive_desc_query_md(p.get_primitive_desc(), dnnl_query_scratchpad_md, 0);
  const std::size_t bytes = md != nullptr ? dnnl_memory_desc_get_size(md) : 0;
  if (bytes > 0) {
    thread_local scratch_buffer scratch;
    args.insert_or_assign(DNNL_ARG_SCRATCHPAD,
                          dnnl::memory(dnnl::memory::desc(*md), strm.get_engine(), scratch.at_least(bytes)));
  }
  p.execute(strm, args);
}

std::size_t cached_primitive::cached_bytes() const {
  if (!prim || prim.get_kind() != dnnl::primitive::kind::matmul) return kOtherPrimitiveBytes;
  const dnnl_memory_desc_t* src = dnnl_primitive_desc_query_md(prim.get_primitive_desc(), dnnl_query_src_md, 0);
  for (int i = 0; src && i < src->ndims; ++i) {
    if (src->dims[i] == DNNL_RUNTIME_DIM_VAL) return kRuntimeMatmulBytes;
  }
  return kShapeMatmulBytes;
}

}  // namespace detail

backend_stats stats() {
  const detail::counters& c = detail::stats_counters();
  return {c.primitives_created.load(), c.create_ns.load(), c.weights_packed.load(), c.pack_ns.load()};
}

}  // namespace unicache::onednn_cpu
