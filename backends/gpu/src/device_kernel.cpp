// The GPU core's compiled-kernel base: programs, launches and their events.
#include "device_kernel.hpp"

namespace unicache::gpu::detail {

device_kernel::~device_kernel() {
  // The programs stay loaded until the work that launched them is done.
  deferred_release::instance().release_after(
      uses_.take(), [programs = std::move(programs_)] {}, &counters_of(device_.cache_owner()).deferred_releases);
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
  stream_access::set_last(device_, s, std::move(done));
}

launch_dims checked_dims(const device& d, const std::array<std::size_t, 3>& global,
                         const std::array<std::size_t, 3>& local, const char* what) {
  const launch_dims dims{global, local};
  d.check_launch(dims, what);
  return dims;
}

}  // namespace unicache::gpu::detail
