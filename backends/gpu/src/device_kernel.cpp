// The GPU core's compiled-kernel base: programs, launches and their events.
#include "device_kernel.hpp"

namespace unicache::gpu::detail {

device_kernel::~device_kernel() {
  // The programs stay loaded until the work that launched them is done.
  std::shared_ptr<std::vector<std::shared_ptr<const kernel>>> held;
  event_list uses;
  try {
    held = std::make_shared<std::vector<std::shared_ptr<const kernel>>>(std::move(programs_));
    uses = uses_.take();
    deferred_release::instance().release_after(uses, [held] {}, &counters_of(device_.cache_owner()).deferred_releases);
  } catch (...) {
    // No host memory to keep them for later: wait for the work; they go after.
    uses_.synchronize();
    for (const auto& e : uses) e->synchronize();
  }
}

std::vector<kernel_binary> device_kernel::binaries() const {
  std::vector<kernel_binary> out;
  for (const auto& k : programs_) out.push_back({k->store_key(), k->binary()});
  return out;
}

const kernel* device_kernel::add_program(const engine& e, const kernel_source& src,
                                         const std::vector<kernel_binary>& preloaded) {
  programs_.push_back(get_program(e, src, preloaded));
  return programs_.back().get();
}

void device_kernel::end(const stream& s, device_memory* used) const {
  std::shared_ptr<const event> done = device_.record(s);
  const std::uint64_t serial = device_.resources(s).serial();
  uses_.note(serial, done);
  if (used) used->note_use(serial, done);
  stream_access::note_execution(device_, s, std::move(done));
  deferred_release::instance().collect(8);  // a few of the oldest; nothing when none is pending
}

device_kernel::execution::~execution() {
  if (finished_) return;
  try {
    kernel_.end(stream_, used_);
  } catch (...) {
    try {
      kernel_.device_.wait(stream_);  // no event: the work must be over before anything it reads can go
    } catch (...) {
      // The stream failed too: its work is over either way.
    }
  }
}

launch_dims checked_dims(const device& d, const std::array<std::size_t, 3>& global,
                         const std::array<std::size_t, 3>& local, const char* what) {
  const launch_dims dims{global, local};
  d.check_launch(dims, what);
  return dims;
}

}  // namespace unicache::gpu::detail
