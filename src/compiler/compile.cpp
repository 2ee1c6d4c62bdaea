// compile() and compiled partitions: the compiled-partition cache,
// execution (adaptive dispatch's first executions included), and the
// errors a backend raises reported as the core's types. Cache blobs are
// cache_blob.cpp's.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <exception>
#include <memory>
#include <new>
#include <string>
#include <unordered_map>

#include "unicache/cache.hpp"
#include "unicache/cache_key.hpp"
#include "unicache/compiler.hpp"
#include "unicache/store.hpp"
#include "compiler/compiled_partition_state.hpp"

namespace unicache {

namespace {

// What a compiled partition entry counts while it is being built; then its
// state's cached_bytes().
constexpr std::size_t kCompiledPartitionBytes = 4096;

// What every shape of one kernel configuration shares: the structure, the
// backend object (two backends on engines of one scope never share a
// compiled partition) and its kernel configuration (its options, the
// kernel-shape mode). Adaptive dispatch keeps one table of shape classes per this key.
std::string configuration_key(const partition& p, const std::vector<std::vector<std::int64_t>>& input_shapes,
                              const engine& e) {
  cache_key key;
  key.add(p.fingerprint()).add(e.get_backend()->name()).add(reinterpret_cast<std::uintptr_t>(e.get_backend()));
  key.add(e.get_backend()->kernel_configuration(p, input_shapes, e));
  return std::string(key.bytes());
}

// The compiled-partition cache key: everything that decides the code that
// runs, i.e. the configuration and the shapes the partition's tensors are
// described with.
std::string compiled_partition_key(const std::string& configuration,
                                   const std::vector<std::vector<std::int64_t>>& input_shapes) {
  cache_key key;
  key.add(configuration);
  key.add(shape_mode_configuration(kernel_shapes::specialized, input_shapes));  // the shapes in full
  return std::string(key.bytes());
}

// Whether an output's bytes may overlap an input's. The addresses are
// compared as ranges, which for a GPU backend's buffer handles can only err
// towards "overlap".
bool outputs_overlap_inputs(const std::vector<tensor>& inputs, const std::vector<tensor>& outputs) {
  auto range = [](const tensor& t) {
    std::uintptr_t bytes = sizeof(float);  // data_type::f32, the only one
    for (const std::int64_t d : t.desc.shape) bytes *= static_cast<std::uintptr_t>(std::max<std::int64_t>(d, 1));
    const auto begin = reinterpret_cast<std::uintptr_t>(t.data);
    return std::pair{begin, begin + bytes};
  };
  for (const tensor& o : outputs) {
    const auto [ob, oe] = range(o);
    for (const tensor& i : inputs) {
      const auto [ib, ie] = range(i);
      if (ob < ie && ib < oe) return true;
    }
  }
  return false;
}

}  // namespace

const std::vector<logical_tensor>& compiled_partition::inputs() const {
  if (!state_) throw compile_error("inputs() of an empty compiled_partition");
  return state_->inputs;
}
const std::vector<logical_tensor>& compiled_partition::outputs() const {
  if (!state_) throw compile_error("outputs() of an empty compiled_partition");
  return state_->outputs;
}

compiled_partition compile_with(const partition& p, const std::vector<std::vector<std::int64_t>>& input_shapes,
                                const engine& e, const std::vector<kernel_binary>& preloaded) {
  detail::check_compilable("compile", p, e);
  if (input_shapes.size() != p.inputs().size()) {
    throw compile_error("compile: partition " + p.fingerprint() + " has " + std::to_string(p.inputs().size()) +
                        " inputs, got " + std::to_string(input_shapes.size()) + " shapes");
  }
  static const bool named = [] {
    try {
      register_owner(compiled_partition_owner, "compiled_partition");
    } catch (const cache_error&) {
      // Claimed under another name by code outside the library: only verbose lines would say so.
    }
    return true;
  }();
  (void)named;
  const std::string configuration = configuration_key(p, input_shapes, e);
  const std::string key = compiled_partition_key(configuration, input_shapes);
  compiled_partition out;
  if (auto hit = kernel_cache().lookup<const compiled_partition::state>(e.scope(), compiled_partition_owner, key)) {
    out.state_ = hit.shared_value();
    return out;
  }
  cache_handle<const compiled_partition::state> cached = kernel_cache().get_or_build<const compiled_partition::state>(
      e.scope(), compiled_partition_owner, key, kCompiledPartitionBytes, [&] {
        auto s = std::make_shared<compiled_partition::state>();
        s->made_by = e.get_backend();
        s->scope = e.scope();
        std::unordered_map<std::uint64_t, std::vector<std::int64_t>> shape_of;
        for (std::size_t i = 0; i < input_shapes.size(); ++i) {
          const logical_tensor& declared = p.inputs()[i];
          const auto& given = input_shapes[i];
          bool fits = given.size() == declared.shape.size();
          for (std::size_t d = 0; fits && d < given.size(); ++d) {
            fits = given[d] > 0 && (declared.shape[d] == unknown_dim || declared.shape[d] == given[d]);
          }
          if (!fits) {
            throw compile_error("compile: input " + std::to_string(i) + " (tensor " + std::to_string(declared.id) +
                                ") is declared " + shape_to_string(declared.shape) + ", got " + shape_to_string(given));
          }
          logical_tensor concrete = declared;
          concrete.shape = given;
          s->inputs.push_back(concrete);
          shape_of[declared.id] = given;
        }
        for (const op& o : p.ops()) {
          const std::string what = "compile: op " + std::to_string(o.id) + " (" + to_string(o.kind) + ")";
          const auto& a = shape_of.at(o.inputs[0]);
          std::vector<std::int64_t> result;
          try {
            if (o.kind == op_kind::matmul) {
              result = matmul_output_shape(a, shape_of.at(o.inputs[1]), o.transpose_a, o.transpose_b, what);
            } else if (is_binary(o.kind)) {
              result = broadcast_shape(a, shape_of.at(o.inputs[1]), what);
            } else if (o.kind == op_kind::transpose) {
              result = transpose_output_shape(a, o.permutation, what);
            } else if (o.kind == op_kind::attention) {
              std::vector<const std::vector<std::int64_t>*> shapes;
              for (std::uint64_t id : o.inputs) shapes.push_back(&shape_of.at(id));
              result = attention_output_shape(shapes, o.layout, what);
            } else {
              result = a;
            }
            if (normalization_parameters(o.kind) > 0) {  // gamma (and beta) as long as a row: kernels read C
              for (std::size_t k = 1; k <= normalization_parameters(o.kind); ++k) {
                const auto& parameter = shape_of.at(o.inputs[k]);
                if (a.empty() || parameter.size() != 1 || parameter[0] != a.back()) {
                  throw graph_error(what + ": " + (k == 1 ? "gamma " : "beta ") + shape_to_string(parameter) +
                                    " for rows of " + std::to_string(a.empty() ? 0 : a.back()));
                }
              }
            }
          } catch (const graph_error& err) {
            throw compile_error(err.what());
          }
          shape_of[o.outputs[0]] = result;
        }
        for (const logical_tensor& declared : p.outputs()) {
          logical_tensor concrete = declared;
          concrete.shape = shape_of.at(declared.id);
          s->outputs.push_back(concrete);
        }
        const auto start = std::chrono::steady_clock::now();
        try {
          s->kernel = e.get_backend()->compile(p, s->inputs, s->outputs, e, preloaded);
        } catch (const compile_error&) {
          throw;
        } catch (const error& err) {
          // A backend's own error type (with its status) stays reachable.
          std::throw_with_nested(compile_error(err.what()));
        } catch (const std::bad_alloc&) {
          throw;
        } catch (const std::exception& err) {
          // A library the backend uses threw its own type (dnnl::error, say):
          // the caller still catches unicache::error, and can reach it nested.
          std::throw_with_nested(compile_error(std::string(e.get_backend()->name()) + ": " + err.what()));
        }
        if (!s->kernel) {
          throw compile_error(std::string(e.get_backend()->name()) + " returned no kernel for partition " + p.fingerprint());
        }
        const auto build_ns = static_cast<std::uint64_t>(
            std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start).count());
        s->family = detail::family_for(p, configuration, e, *s->kernel, build_ns);
        if (!s->family) s->shape_class.store(compiled_partition::state::no_class(), std::memory_order_relaxed);
        s->identity = e.get_backend()->identity(e);
        s->blob_key = detail::blob_key(p, input_shapes, e);
        return std::shared_ptr<const compiled_partition::state>(std::move(s));
      });
  out.state_ = cached.value();
  // A stand-in is this caller's (and any compile() that waited for it); the
  // next compile() of these shapes compiles again, a lookup of kernels.
  if (out.state_->kernel->stand_in()) kernel_cache().remove(e.scope(), compiled_partition_owner, key);
  return out;
}

void compiled_partition::execute(stream& s, const std::vector<tensor>& inputs,
                                 const std::vector<tensor>& outputs) const {
  if (!state_) throw execute_error("execute() of an empty compiled_partition");
  auto check = [](const std::vector<tensor>& given, const std::vector<logical_tensor>& want, const char* what) {
    if (given.size() != want.size()) {
      throw execute_error(std::string("execute: expected ") + std::to_string(want.size()) + " " + what + ", got " +
                          std::to_string(given.size()));
    }
    for (std::size_t i = 0; i < given.size(); ++i) {
      if (given[i].desc.shape != want[i].shape || given[i].data == nullptr) {
        throw execute_error(std::string("execute: ") + what + " " + std::to_string(i) + " must be " +
                            shape_to_string(want[i].shape) + " with data, got " + shape_to_string(given[i].desc.shape));
      }
    }
  };
  check(inputs, state_->inputs, "inputs");
  check(outputs, state_->outputs, "outputs");
  const engine& e = s.get_engine();
  if (e.get_backend() != state_->made_by || !(e.scope() == state_->scope)) {
    throw execute_error(std::string("execute: the stream belongs to another engine (") +
                        (e.get_backend() ? e.get_backend()->name() : "none") + ", context " + std::to_string(e.scope().context_id) +
                        ") than the one the partition was compiled for (" +
                        (state_->made_by ? state_->made_by->name() : "none") + ", context " +
                        std::to_string(state_->scope.context_id) + ")");
  }
  try {
    const detail::class_ref* cls = state_->shape_class.load(std::memory_order_acquire);
    if (cls == nullptr) {
      // The shape's first execution. Until a class of the process is queued
      // no specialized kernel exists: the generic kernel runs, and the class
      // is found once it is enqueued, off the request's critical path.
      if (!detail::specialization_queued()) {
        state_->execute_before_class(s, inputs, outputs);
        return;
      }
      cls = &state_->resolve_class(e);
    }
    if (!*cls) {
      state_->kernel->execute(s, inputs, outputs);
      return;
    }
    // Adaptive: the class's specialized kernel if it is ready, else the
    // generic one, timed for the cost model.
    detail::specialized_failure failure;
    switch (detail::run_specialized(*cls, s, inputs, outputs, &failure)) {
      case detail::specialized_run::ran:
        return;
      case detail::specialized_run::failed:
        // The generic kernel answers instead; its own failure is the
        // caller's, and clears the specialized kernel of blame. Where the
        // failed run may have written over an input, nothing can answer: the
        // specialized kernel is dropped and the error is the caller's.
        if (outputs_overlap_inputs(inputs, outputs)) {
          detail::drop_failed(*cls, failure, e, /*answered=*/false);
          std::rethrow_exception(failure.error);
        }
        state_->kernel->execute(s, inputs, outputs);
        detail::drop_failed(*cls, failure, e, /*answered=*/true);
        return;
      case detail::specialized_run::not_ready:
        break;
    }
    // Timed while the class is cold: on the device where execute() returns
    // before the device is done, else by the host's clock.
    detail::execution_time took;
    bool host_clock = false;
    took.device = detail::start_generic_timer(*cls, s, &host_clock);
    run_timed(*state_->kernel, s, inputs, outputs, took, host_clock);
    detail::record_generic(*cls, std::move(took), s, state_->inputs, state_->outputs);
  } catch (const execute_error&) {
    throw;
  } catch (const error& err) {
    std::throw_with_nested(execute_error(err.what()));
  } catch (const std::bad_alloc&) {
    throw;
  } catch (const std::exception& err) {
    // As in compile(): a foreign type from below the backend, nested.
    std::throw_with_nested(execute_error(std::string(state_->made_by->name()) + ": " + err.what()));
  }
}

compiled_partition compile(const partition& p, const std::vector<std::vector<std::int64_t>>& input_shapes,
                           const engine& e) {
  return detail::reporting_foreign("compile", [&] { return compile_with(p, input_shapes, e, {}); });
}

stream make_stream(const engine& e) {
  if (!e.get_backend()) throw compile_error("make_stream: the engine has no backend");
  return detail::reporting_foreign("make_stream", [&] { return e.get_backend()->make_stream(e); });
}

}  // namespace unicache
