// The generated-kernel backend over a GPU API's device: compiling each
// partition kind, the specialized GEMMs of shape classes and their tuning,
// waiting for a stream, registration and the counters.
#include <algorithm>
#include <cstring>
#include <map>
#include <string>

#include "attention_kernel.hpp"
#include "device_memory.hpp"
#include "elementwise_kernels.hpp"
#include "gemm_kernel.hpp"
#include "unicache/backend_support.hpp"
#include "unicache/compiler.hpp"

namespace unicache::gpu {

kernel_args& kernel_args::put(const void* v, std::size_t n) {
  if (count_ == max_count) throw invalid_argument("gpu: more than 64 kernel arguments");
  slots_[count_] = 0;
  std::memcpy(&slots_[count_], v, n);
  sizes_[count_] = static_cast<std::uint8_t>(n);
  ++count_;
  return *this;
}

namespace detail {
namespace {

// The kernel path's view of a device and engine.
class device_builder final : public kernel_builder {
 public:
  device_builder(const device& d, const engine& e) : device_(d), engine_(e) {}
  const char* backend_name() const override { return device_.name(); }
  device_identity identity() const override { return device_.facts(engine_).identity; }
  std::unique_ptr<device_program> build(const kernel_source& src) const override { return device_.build(engine_, src); }
  std::unique_ptr<device_program> load(const kernel_source& src, byte_span binary) const override {
    return device_.load(engine_, src, binary);
  }
  std::string load_refusal() const override { return device_.load_refusal(engine_); }
  bool reads_stored_binaries() const override { return device_.reads_stored_binaries(engine_); }

 private:
  const device& device_;
  const engine& engine_;
};

// Scratch memory for timing candidates, zeroed on the tuning stream. Not
// through allocate(): tuning never evicts a workload's packed weights to
// make room; out of memory, the class stays generic.
class tuning_scratch {
 public:
  tuning_scratch(const device& d, const stream& s, std::int64_t floats)
      : device_(d), engine_(s.get_engine()),
        bytes_(static_cast<std::size_t>(std::max<std::int64_t>(floats, 1)) * sizeof(float)),
        memory_(d.allocate(engine_, bytes_, "tuning scratch", /*last_try=*/true)) {
    try {
      d.fill_zero(s, memory_, bytes_);
      d.wait(s);  // settled before the next buffer's allocation may throw
    } catch (...) {
      try {
        d.wait(s);
      } catch (...) {
        // The stream failed: its work is over either way.
      }
      d.free(engine_, memory_);
      throw;
    }
  }
  // The tuning stream has finished with it (every candidate's run waits).
  ~tuning_scratch() { device_.free(engine_, memory_); }
  tuning_scratch(const tuning_scratch&) = delete;
  tuning_scratch& operator=(const tuning_scratch&) = delete;
  buffer get() const { return memory_; }

 private:
  const device& device_;
  engine engine_;
  std::size_t bytes_;
  buffer memory_;
};

// The device time between two timed events of a stream.
class event_timer final : public device_timer {
 public:
  event_timer(const device& d, std::shared_ptr<const event> start) : device_(d), start_(std::move(start)) {}
  void stop(stream& s) override { stop_ = device_.record_timed(s); }
  bool done() const override { return !stop_ || stop_->query() != event::state::pending; }
  std::optional<std::uint64_t> elapsed_ns() const override {
    if (!stop_ || stop_->query() != event::state::complete) return std::nullopt;
    return stop_->ns_since(*start_);
  }

 private:
  const device& device_;
  std::shared_ptr<const event> start_, stop_;
};

// The split-K parts of a MatMul partition's generic GEMM at these input
// shapes (gemm_kernel's choice, from the sizes alone); 1 for shapes the
// GEMM cannot take (compile() says why).
int generic_splits(const device& d, const partition& p, const std::vector<std::vector<std::int64_t>>& shapes,
                   const engine& e) {
  if (shapes.size() < 2 || p.ops().empty()) return 1;
  const std::optional<kernels::matmul_sizes> s = kernels::matmul_sizes_of(p.ops().front(), shapes[0], shapes[1]);
  if (!s) return 1;
  const engine_facts& f = d.facts(e);
  return kernels::gemm_splits(s->m, s->n, s->k, s->batch, f.gemm, f.compute_units);
}

class generated_backend final : public backend {
 public:
  explicit generated_backend(std::unique_ptr<device> d) : device_(std::move(d)) {}

  const device& dev() const { return *device_; }
  const char* name() const override { return device_->name(); }
  engine_kind kind() const override { return engine_kind::gpu; }
  owner_id cache_owner() const override { return device_->cache_owner(); }

  std::shared_ptr<const compiled_kernel> compile(const partition& p, const std::vector<logical_tensor>& in,
                                                 const std::vector<logical_tensor>& out, const engine& e,
                                                 const std::vector<kernel_binary>& preloaded) override {
    const device& d = *device_;
    switch (p.pattern()) {
      case partition::kind::fused_matmul: return std::make_shared<gemm_kernel>(d, p, in, out, e, preloaded);
      case partition::kind::binary: return std::make_shared<binary_kernel>(d, p, in, out, e, preloaded);
      case partition::kind::eltwise:
      case partition::kind::softmax: return std::make_shared<unary_kernel>(d, p, in, e, preloaded);
      case partition::kind::layer_norm:
      case partition::kind::rms_norm: return std::make_shared<layer_norm_kernel>(d, p, in, e, preloaded);
      case partition::kind::transpose: return std::make_shared<transpose_kernel>(d, p, in, e, preloaded);
      case partition::kind::attention: return std::make_shared<attention_kernel>(d, p, in, e, preloaded);
    }
    throw compile_error(std::string(name()) + ": unknown partition kind");
  }

  stream make_stream(const engine& e) override { return device_->make_stream(e); }

  // A failure of the stream's work is a stream_error, with the API's error
  // nested where the API reports one (OpenCL's clFinish does not: the
  // failed executions' events do).
  void wait(stream& s) override {
    try {
      device_->wait(s);
    } catch (const execute_error&) {
      throw;
    } catch (const error& err) {
      std::throw_with_nested(stream_error(err.what()));
    }
    deferred_release::instance().collect();
    stream_access::report_failure(*device_, s);
  }

  std::unique_ptr<device_timer> start_timer(stream& s) override {
    std::shared_ptr<const event> start = device_->record_timed(s);
    if (!start) return nullptr;
    return std::make_unique<event_timer>(*device_, std::move(start));
  }

  device_identity identity(const engine& e) const override { return device_->facts(e).identity; }

  // A GEMM's class (kernels::gemm_shape_class).
  shape_class specialization_class(const partition& p, const std::vector<logical_tensor>& in,
                                   const std::vector<logical_tensor>& out, const engine& e) const override {
    return kernels::gemm_specialization_class(p, in, out, device_->facts(e).gemm);
  }
  // Its kernel is cheap to make, a load and some timing, when the store has
  // its tiles or every candidate is built already (another class of the
  // configuration was tuned).
  bool specialization_ready(const partition& p, const std::vector<logical_tensor>& in,
                            const std::vector<logical_tensor>& out, const engine& e) const override {
    const engine_facts& f = device_->facts(e);
    return kernels::gemm_specialization_ready(p, in, out, f.gemm, device_->dialect(), e, cache_owner(), f.identity);
  }

  // The class's GEMM: the stored choice of tiles if the store has one, else
  // the fastest candidate, timed on a stream of the backend's own with
  // zeroed scratch buffers (each run waits for that stream), and stored for
  // the next process.
  std::shared_ptr<const compiled_kernel> specialize(const partition& p, const std::vector<logical_tensor>& in,
                                                    const std::vector<logical_tensor>& out, const engine& e) override {
    const device& d = *device_;
    const engine_facts& f = d.facts(e);
    const kernels::gemm_problem g(p, in, out, f.gemm, kernel_shapes::adaptive);
    const std::vector<kernels::gemm_tiles> candidates = kernels::gemm_candidates(g, f.gemm);
    auto kernel_with = [&](const kernels::gemm_tiles& t) {
      return std::make_shared<const gemm_kernel>(d, p, in, out, e, std::vector<kernel_binary>{}, t, true);
    };
    if (const auto tiles = kernels::stored_tiles(name(), f.identity, g, candidates)) return kernel_with(*tiles);
    const stream own = d.make_stream(e);
    const auto b_floats = static_cast<std::int64_t>(kernels::gemm_scratch_b_floats(g, candidates));
    const tuning_scratch a(d, own, kernels::elements(in[0].shape)), b(d, own, b_floats),
        c(d, own, kernels::elements(out[0].shape));
    std::vector<std::unique_ptr<tuning_scratch>> post_buffers;
    std::vector<buffer> posts;
    for (const kernels::gemm_problem::post& post : g.posts) {
      post_buffers.push_back(std::make_unique<tuning_scratch>(d, own, kernels::elements(in[post.input].shape)));
      posts.push_back(post_buffers.back()->get());
    }
    // However tuning ends, the scratch goes only after the stream's work.
    struct wait_at_exit {
      const device& d;
      const stream& s;
      ~wait_at_exit() {
        try {
          d.wait(s);
        } catch (...) {
          // The stream failed: its work is over either way.
        }
      }
    } settle_scratch{d, own};
    return kernel_with(kernels::tune_gemm(name(), f.identity, g, candidates, [&](const kernels::gemm_tiles& t) {
      return [k = kernel_with(t), &d, &own, &a, &b, &c, &posts, &g] {
        k->run_gemm(own, a.get(), b.get(), c.get(), posts, g.m);
        d.wait(own);
      };
    }));
  }

  // Shape-agnostic kernels depend on the ranks only (sizes and strides are
  // arguments), and a GEMM's on whether its K is shared out (each split is
  // a kernel of its own); specialized ones on every size.
  std::string kernel_configuration(const partition& p, const std::vector<std::vector<std::int64_t>>& input_shapes,
                                   const engine& e) const override {
    std::string c = shape_mode_configuration(current_kernel_shapes(), input_shapes);
    if (p.pattern() == partition::kind::fused_matmul && current_kernel_shapes() != kernel_shapes::specialized) {
      if (const int splits = generic_splits(*device_, p, input_shapes, e); splits > 1) c += "/split" + std::to_string(splits);
    }
    return c;
  }

 private:
  std::unique_ptr<device> device_;
};

}  // namespace
}  // namespace detail

backend* register_device(std::unique_ptr<device> d) {
  auto* b = new detail::generated_backend(std::move(d));  // lives as long as the process, as backends do
  register_backend(b);
  return b;
}

const device* device_of(const backend* b) {
  const auto* generated = dynamic_cast<const detail::generated_backend*>(b);
  return generated ? &generated->dev() : nullptr;
}

namespace {
const device& device_of_engine(const engine& e, const char* what) {
  const device* d = device_of(e.get_backend());
  if (!d) throw invalid_argument(std::string("gpu: ") + what + " on an engine of no GPU backend");
  return *d;
}
}  // namespace

std::shared_ptr<const kernel> get_program(const engine& e, const kernel_source& src,
                                          const std::vector<kernel_binary>& preloaded) {
  const device& d = device_of_engine(e, "a kernel");
  d.facts(e);  // an engine of the device's API
  return get_or_build_kernel(d.cache_owner(), e.scope(), detail::device_builder(d, e), src, preloaded);
}

std::shared_ptr<const kernel> find_program(const engine& e, const kernel_source& src) {
  const device& d = device_of_engine(e, "a kernel");
  d.facts(e);
  return kernel_if_built(d.cache_owner(), e.scope(), detail::device_builder(d, e), src);
}

void finish_deferred_releases() { detail::deferred_release::instance().drain(0); }

buffer allocate(const engine& e, std::size_t bytes, const char* what) {
  return detail::allocate(device_of_engine(e, what), e, bytes, what);
}

backend_stats stats(owner_id owner) {
  const detail::counters& c = detail::counters_of(owner);
  const kernel_path_stats k = kernel_path::stats(owner);
  backend_stats s;
  s.probe_builds = c.probe_builds.load();
  s.programs_from_source = k.from_source;
  s.programs_from_binary = k.from_binary;
  s.binaries_rejected = k.rejected;
  s.binaries_stored = k.stored;
  s.weights_packed = c.weights_packed.load();
  s.weights_released = c.weights_released.load();
  s.out_of_memory_retries = c.out_of_memory_retries.load();
  s.deferred_releases = c.deferred_releases.load();
  s.split_variants_deferred = c.split_variants_deferred.load();
  s.build_ns = k.build_ns;
  s.load_ns = k.load_ns;
  s.pack_ns = c.pack_ns.load();
  s.first_launch_ns = k.first_launch_ns;
  return s;
}

void count_probe_build(owner_id owner) {
  detail::counters_of(owner).probe_builds.fetch_add(1, std::memory_order_relaxed);
}

}  // namespace unicache::gpu
