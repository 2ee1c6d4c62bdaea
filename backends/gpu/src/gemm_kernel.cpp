// The GPU core's GEMM kernel, its packed weights and its split-K.
#include "gemm_kernel.hpp"

#include <unistd.h>

#include <functional>
#include <map>
#include <mutex>
#include <string>

#include "unicache/cache_key.hpp"
#include "unicache/compiler.hpp"
#include "unicache/kernel_path.hpp"
#include "unicache/constant_registry.hpp"

namespace unicache::gpu::detail {

// A packed weight on the device, and the event after its packing (on the
// stream that packed it): another stream waits for it on the device.
struct gemm_kernel::packed_weight {
  packed_weight(const device& d, const engine& e, std::size_t bytes) : memory(d, e, bytes, "packed weight") {
    memory.count_release_in(&counters_of(d.cache_owner()).weights_released);
  }
  device_memory memory;
  std::shared_ptr<const event> packing;
  std::uint64_t packed_on = 0;  // the packing stream's serial
  mutable std::atomic<bool> packing_done{false};
};

namespace {

using weight_registry = constant_registry<gemm_kernel::packed_weight>;

// One registry per GPU backend (its cache owner id names its packed weights).
weight_registry& weights(owner_id owner) {
  static std::mutex mu;
  static auto* const all = new std::map<owner_id, weight_registry*>();
  std::lock_guard lock(mu);
  weight_registry*& r = (*all)[owner];
  if (!r) r = new weight_registry(constant_tensor_cache(), owner);
  return *r;
}

// Reads a constant for the contents check: whole (its fingerprint, when it
// is packed) in stream order; its sampled blocks (every execution) without
// waiting for the stream's queued work where only unicache enqueues to the
// stream (its work never writes a constant input).
struct device_reader {
  const device& d;
  const stream& s;
  const tensor& t;
  void operator()(std::size_t first, std::size_t block, std::size_t stride, std::size_t count,
                  unsigned char* out) const {
    d.read_blocks(s, t.data, first, block, stride, count, out, true);
  }
  void read_samples(std::size_t first, std::size_t block, std::size_t stride, std::size_t count,
                    unsigned char* out) const {
    d.read_blocks(s, t.data, first, block, stride, count, out, !d.resources(s).only_unicache_work());
  }
};

// The split-K variants of generic GEMMs given to a background build, by
// context and kernel configuration, and whether that build is over. A
// variant is given to the background once: a shape that needs it after a
// background build that failed (or whose kernel the cache evicted) builds
// it in line, where the failure reaches the caller. In a child of fork()
// (whose builds the parent queued, and whose `mu_` a parent's thread may
// have held) nothing is given to the background.
class background_variants {
 public:
  // True if the background has it now (queued, not built yet).
  bool pending(const engine& e, const std::string& config_key) {
    if (owner_ != ::getpid()) return false;
    const std::string key = scoped_key(e.scope(), config_key);
    std::lock_guard lock(mu_);
    const auto it = done_.find(key);
    return it != done_.end() && !it->second;
  }
  // True if the background has it now, queued by this call or before.
  bool build_later(const engine& e, kernels::dialect dialect, const kernels::gemm_config& config,
                   int vector_work_group, const std::string& config_key) {
    if (owner_ != ::getpid()) return false;
    const std::string key = scoped_key(e.scope(), config_key);
    std::function<void()> task = [this, e, dialect, config, vector_work_group, key] {
      try {
        // The sum first: once the GEMM is in the kernel cache, a compile()
        // takes this variant and must find every kernel of it there.
        if (config.tiles.split_k > 1) get_program(e, kernels::gemm_reduce_source(dialect, config, vector_work_group), {});
        get_program(e, kernels::gemm_source(dialect, config), {});
      } catch (...) {
        // Built in line by the next shape that needs it, which reports it.
      }
      std::lock_guard lock(mu_);
      done_[key] = true;
    };
    {
      std::lock_guard lock(mu_);
      if (const auto it = done_.find(key); it != done_.end()) return !it->second;
      done_[key] = false;
    }
    bool queued = false;
    try {
      queued = build_in_background(std::move(task));
    } catch (...) {
      // Nothing queued.
    }
    if (!queued) {
      std::lock_guard lock(mu_);
      done_.erase(key);
    }
    return queued;
  }

 private:
  static std::string scoped_key(const cache_scope& scope, const std::string& config_key) {
    cache_key k;
    k.add(static_cast<int>(scope.kind)).add(scope.device_id).add(scope.context_id).add(config_key);
    return std::string(k.bytes());
  }
  const pid_t owner_ = ::getpid();
  std::mutex mu_;
  std::map<std::string, bool> done_;  // queued variants: true once their build is over
};

background_variants& variants_in_background() {
  static auto* const v = new background_variants();  // outlives every background task
  return *v;
}

// The engine's generic tiles (turned around for a narrow batch: batch_tiles),
// split-K as the shapes ask (gemm_splits), with
// one exception: where the kernel of that split must be built (neither the
// kernel cache nor the store has it) and the configuration's other split
// (1 or kGenericSplitK parts, where the shapes allow it: gemm_split_allowed)
// is in the kernel cache, the other one runs now, a stand-in, and this one
// is built in the background. Both compute the same product for these
// shapes; a new shape's request then never waits for a build its
// configuration has an alternative to. Not for a blob's binaries, which
// load, not without background threads, and not on an engine that compiles
// ahead of time.
kernels::gemm_tiles generic_tiles(const device& d, const partition& p, const std::vector<logical_tensor>& in,
                                  const std::vector<logical_tensor>& out, const engine& e,
                                  const std::vector<kernel_binary>& preloaded, counters& n) {
  const engine_facts& facts = d.facts(e);
  const kernel_shapes mode = current_kernel_shapes();
  kernels::gemm_tiles t = kernels::batch_tiles(kernels::gemm_problem(p, in, out, facts.gemm, mode), facts.gemm);
  const kernels::gemm_problem wanted(p, in, out, t, mode);
  t.split_k = kernels::gemm_splits(wanted, facts.compute_units);
  // An engine that compiles ahead of time (it reads no stored binaries)
  // builds the variant the shapes ask for, in line: it runs nothing.
  if (!preloaded.empty() || mode == kernel_shapes::specialized || !d.reads_stored_binaries(e)) return t;
  kernels::gemm_tiles other = t;
  other.split_k = t.split_k > 1 ? 1 : kernels::kGenericSplitK;
  if (!kernels::gemm_split_allowed(wanted, other.split_k)) return t;
  const kernels::dialect dialect = d.dialect();
  kernels::gemm_config want = wanted.config, alternative = wanted.config;  // the tiles are the config's only difference
  want.tiles = t;
  alternative.tiles = other;
  const std::string want_key = kernels::gemm_kernel_config(dialect, want);
  if (kernel_if_cached(d.cache_owner(), e.scope(), want_key)) return t;
  if (!kernel_if_cached(d.cache_owner(), e.scope(), kernels::gemm_kernel_config(dialect, alternative))) return t;
  background_variants& background = variants_in_background();
  // Queued already: no source to generate, no store to read again.
  // Otherwise a stored binary loads in a millisecond or two: in line, as
  // any kernel (behind the background's queue, many shapes would take the
  // other one).
  if (!background.pending(e, want_key)) {
    if (find_program(e, kernels::gemm_source(dialect, want))) return t;
    if (!background.build_later(e, dialect, want, facts.vector_work_group, want_key)) return t;
  }
  n.split_variants_deferred.fetch_add(1, std::memory_order_relaxed);
  return other;
}

void add_posts(kernel_args& args, const kernels::gemm_problem& g, const std::vector<buffer>& posts) {
  for (std::size_t i = 0; i < g.posts.size(); ++i) {
    const kernels::gemm_problem::post& post = g.posts[i];
    args.add(posts[i]).add(std::int64_t{post.batch_stride}).add(std::int64_t{post.row_stride});
    args.add(std::int64_t{post.column_stride});
  }
}

}  // namespace

gemm_kernel::gemm_kernel(const device& d, const partition& p, const std::vector<logical_tensor>& in,
                         const std::vector<logical_tensor>& out, const engine& e,
                         const std::vector<kernel_binary>& preloaded)
    : gemm_kernel(d, p, in, out, e, preloaded, generic_tiles(d, p, in, out, e, preloaded, counters_of(d.cache_owner())),
                  false) {
  stand_in_ = problem_.config.tiles.split_k != kernels::gemm_splits(problem_, d.facts(e).compute_units);
}

gemm_kernel::gemm_kernel(const device& d, const partition& p, const std::vector<logical_tensor>& in,
                         const std::vector<logical_tensor>& out, const engine& e,
                         const std::vector<kernel_binary>& preloaded, const kernels::gemm_tiles& tiles, bool any_rows)
    : device_kernel(d),
      // A class's kernel (any_rows) takes its sizes as arguments whatever the
      // mode is when it is built in the background.
      problem_(p, in, out, tiles, any_rows ? kernel_shapes::adaptive : current_kernel_shapes()),
      any_rows_(any_rows),
      launch_(checked_dims(d, problem_.global(), problem_.local(), "the GEMM")),
      counters_(&counters_of(d.cache_owner())) {
  const kernels::dialect dialect = d.dialect();
  const int vector_work_group = d.facts(e).vector_work_group;
  gemm_ = add_program(
      e, kernels::gemm_kernel_config(dialect, problem_.config),
      [&] { return kernels::gemm_source(dialect, problem_.config); }, preloaded);
  if (problem_.config.packed_b) {
    pack_launch_ = checked_dims(d, problem_.pack_global(vector_work_group),
                                {static_cast<std::size_t>(vector_work_group), 1, 1}, "packing the weight");
    pack_ = add_program(e, kernels::pack_source(dialect, problem_.config.transpose_b, vector_work_group), preloaded);
    weights_ = &weights(d.cache_owner());
    slot_ = weights_->make_slot();
  }
  if (problem_.config.tiles.split_k > 1) {
    reduce_work_group_ = vector_work_group;
    reduce_ = add_program(e, kernels::gemm_reduce_source(dialect, problem_.config, reduce_work_group_), preloaded);
  }
}

void gemm_kernel::execute(stream& s, const std::vector<tensor>& inputs, const std::vector<tensor>& outputs) const {
  execution run(*this, s);
  std::shared_ptr<packed_weight> weight;
  buffer b = inputs[1].data;
  if (pack_) {
    weight = packed(s, inputs[1]);
    b = weight->memory.get();
    run.uses(&weight->memory);
  }
  std::vector<buffer> posts;
  for (const kernels::gemm_problem::post& post : problem_.posts) posts.push_back(inputs[post.input].data);
  // M is C's rows (A's are K when A is transposed).
  const std::vector<std::int64_t>& c = outputs[0].desc.shape;
  run_gemm(s, inputs[0].data, b, outputs[0].data, posts, any_rows_ ? c[c.size() - 2] : 0);
  run.finish();
}

void gemm_kernel::run_gemm(const stream& s, buffer a, buffer b, buffer c, const std::vector<buffer>& posts,
                           long rows) const {
  const kernels::gemm_problem g = rows ? problem_.with_rows(rows) : problem_;
  const launch_dims dims = rows ? checked_dims(device_, g.global(), g.local(), "the GEMM") : launch_;
  // Split-K: the parts go to the stream's workspace (the stream's GEMMs run
  // in turn), then gemm_reduce writes C.
  buffer out = c;
  if (reduce_) {
    out = stream_access::workspace(device_, s,
                                   static_cast<std::size_t>(g.config.tiles.split_k * g.m * g.n) * sizeof(float));
  }
  kernel_args args;
  args.add(a).add(b).add(out);
  args.add(std::int32_t(g.m)).add(std::int32_t(g.n)).add(std::int32_t(g.k));
  args.add(std::int64_t{g.lda}).add(std::int64_t{pack_ ? g.packed_n : g.ldb}).add(std::int64_t{g.n});
  args.add(std::int64_t{g.sa}).add(std::int64_t{pack_ ? 0 : g.sb}).add(std::int64_t{g.m * g.n});
  add_posts(args, g, posts);
  launch(*gemm_, s, args, dims);
  if (!reduce_) return;
  kernel_args reduce_args;
  reduce_args.add(out).add(c).add(std::int32_t(g.m)).add(std::int32_t(g.n)).add(std::int64_t{g.n});
  add_posts(reduce_args, g, posts);
  const auto wg = static_cast<std::size_t>(reduce_work_group_);
  launch(*reduce_, s, reduce_args,
         checked_dims(device_, {kernels::round_up(g.m * g.n, reduce_work_group_), 1, 1}, {wg, 1, 1},
                      "the split-K sum"));
}

std::shared_ptr<gemm_kernel::packed_weight> gemm_kernel::packed(const stream& s, const tensor& t) const {
  const kernels::gemm_problem& g = problem_;
  const engine& e = s.get_engine();
  const std::size_t bytes = g.packed_bytes();
  const std::size_t source_bytes = static_cast<std::size_t>(kernels::elements(t.desc.shape)) * sizeof(float);
  const std::uint64_t serial = device_.resources(s).serial();
  counters& n = *counters_;
  auto slot = std::static_pointer_cast<weight_registry::slot>(slot_);
  const std::optional<constant_check> check =
      device_.resources(s).versioned_constants() ? std::optional(constant_check::none) : std::nullopt;
  std::shared_ptr<packed_weight> w = weights_->get(
      slot, e.scope(), {t.data, t.version, source_bytes}, g.packed_layout(), bytes, device_reader{device_, s, t}, [&] {
        const time_without_first_launches timer;  // the pack kernel's first launch counts as first_launch_ns
        auto packed = std::make_shared<packed_weight>(device_, e, bytes);
        kernel_args args;
        args.add(t.data).add(packed->memory.get()).add(std::int32_t(g.k)).add(std::int32_t(g.n));
        args.add(std::int64_t{g.ldb}).add(std::int32_t(g.packed_k)).add(std::int32_t(g.packed_n));
        launch(*pack_, s, args, pack_launch_);
        try {
          packed->packing = device_.record(s);
        } catch (...) {
          device_.wait(s);  // no event for the packing: it must be over before the memory can go
          throw;
        }
        packed->memory.note_use(serial, packed->packing);
        packed->packed_on = serial;
        n.weights_packed.fetch_add(1, std::memory_order_relaxed);
        n.pack_ns.fetch_add(timer.ns(), std::memory_order_relaxed);
        return packed;
      },
      check);
  // Packed on another stream: this one waits for the packing, on the device.
  if (w->packed_on != serial && !w->packing_done.load(std::memory_order_acquire)) {
    switch (w->packing->query()) {
      case event::state::pending: device_.wait_for(s, *w->packing); break;
      case event::state::complete: w->packing_done.store(true, std::memory_order_release); break;
      case event::state::failed:
        throw stream_error(std::string(device_.name()) + ": packing this weight failed on the stream that packed it");
    }
  }
  return w;
}

}  // namespace unicache::gpu::detail
