// Adaptive dispatch (kernel_shapes::adaptive): how a compiled partition picks,
// per execution, between its generic kernel and the specialized kernel of
// its shape class, and counts what decides when a class is specialized. See
// unicache/specialization.hpp for the contract; the cost model and the
// dispatch are in adaptive_dispatch.cpp, the background builds in
// specializer.cpp, the state they share in shape_class_table.hpp.
//
// Structure: a class_table per shape-agnostic compiled partition (partition,
// backend, scope and kernel configuration: what every shape's compiled
// partition shares), holding a class_state per shape class. Each compiled
// shape keeps its table, and from its first execution on a class_ref to its
// class (found then, under the table's lock). A class publishes its
// specialized kernel through an atomic pointer that executions read inside an
// epoch guard; a replaced or evicted variant is retired through the epoch
// domain, so a reader never sees it freed and never takes a lock.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <exception>

#include "unicache/backend.hpp"

namespace unicache::detail {

struct class_table;
struct class_state;

// The shape class of one compiled shape. An empty ref (no class) runs the
// generic kernel only: the mode is not adaptive, or the backend has no
// specialized kernel for these shapes.
struct class_ref {
  std::shared_ptr<class_table> family;
  std::shared_ptr<class_state> cls;
  explicit operator bool() const { return cls != nullptr; }
};

// The table of shape classes that `family_key` (the shape-agnostic
// compiled-partition key) names for `p` on `e`, for a shape compiled in
// adaptive mode; nullptr in any other mode or where the backend's kernel
// was built for exactly its shapes (compiled_kernel::built_for_its_shapes:
// only its build time is recorded). `generic_build_ns` is the measured build
// time of the shape's generic kernel: the longest of these per backend is
// the cost model's first estimate of a build. Thread-safe.
std::shared_ptr<class_table> family_for(const partition& p, const std::string& family_key, const engine& e,
                                        const compiled_kernel& generic, std::uint64_t generic_build_ns);

// The class of `in` (concrete shapes; `out` at them) in `family`, on `e`:
// empty where the backend has no specialized kernel for these shapes. A new
// class asks the backend whether its kernel is at hand (it may read the
// store). Thread-safe; throws what the backend throws.
class_ref class_in(const std::shared_ptr<class_table>& family, const engine& e, const std::vector<logical_tensor>& in,
                   const std::vector<logical_tensor>& out);

// Warns once per family that the backend threw `what` naming a shape's
// class (the shape then has none).
void report_class_lookup_failure(class_table& family, const engine& e, const std::string& what);

// Whether any class of the process was ever queued for specialization.
// Until one is, no specialized kernel exists, and a new shape's first
// execution runs the generic kernel whatever its class: its class is found
// after that execution is enqueued (on a GPU, while the device runs it).
bool specialization_queued();

// What run_specialized did.
enum class specialized_run {
  ran,        // the class's specialized kernel ran
  not_ready,  // nothing ran: the caller runs the generic kernel
  failed,     // the specialized kernel threw (`failure` says what)
};
struct specialized_variant;
struct specialized_failure {
  specialized_variant* variant = nullptr;  // compared, never dereferenced, by drop_failed
  std::shared_ptr<const compiled_kernel> kernel;
  std::exception_ptr error;
};

// Runs the class's specialized kernel if one is ready and cached. Lock-free.
specialized_run run_specialized(const class_ref& t, stream& s, const std::vector<tensor>& inputs,
                                const std::vector<tensor>& outputs, specialized_failure* failure);

// After a failed specialized run: drops the variant for good (the class
// fails, warned once). The caller then ran the generic kernel successfully
// (`answered`), or could not (the outputs may overlap the inputs) and
// rethrows. A generic run that fails as well is not followed by this: the
// fault was not the specialized kernel's.
void drop_failed(const class_ref& t, const specialized_failure& failure, const engine& e, bool answered);

// What one generic execution took: the host's clock around execute(), or a
// device timer (backend::start_timer) read once the device is done.
struct execution_time {
  std::optional<std::uint64_t> host_ns;
  std::unique_ptr<device_timer> device;
  // The shape's first execution, run before its class was known
  // (start_deferred_timer timed it, if at all).
  bool deferred = false;
};
// How this generic execution of the class is timed: by the returned device
// timer (started on `s`; one execution in kDeviceTimingEvery while the class
// is cold or queued, where the backend times on the device, until
// kGenericTimedEnough executions are accounted for), by the host's
// clock around execute() (*host_clock: a backend without device timers), or
// not at all (nullptr, *host_clock false).
std::unique_ptr<device_timer> start_generic_timer(const class_ref& t, stream& s, bool* host_clock);
// The same for a shape's first execution while its class is not known yet
// (specialization_queued() false): not timed until some shape of the family
// has a class; then timed as the family's backend times (one in
// kDeviceTimingEvery of these on the device, each counting for itself only;
// every one by the host's clock), learnt from the backend at the family's
// first such execution.
std::unique_ptr<device_timer> start_deferred_timer(class_table& family, stream& s, bool* host_clock);
// Counts one generic execution for the class (its time, once known: a
// device timer is read at a later call, when the device is done) and, when
// the class turns hot, queues its specialization for the shapes `in` ->
// `out` on the stream's engine. Never blocks on a build or the device.
void record_generic(const class_ref& t, execution_time time, const stream& s, const std::vector<logical_tensor>& in,
                    const std::vector<logical_tensor>& out);

}  // namespace unicache::detail
