// The base of the GPU core's compiled kernels: the programs a kernel
// launches, enqueued on the caller's stream, and the events of the streams
// that ran it, so that its programs outlive the work queued with them.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "device_memory.hpp"
#include "lifetime.hpp"
#include "unicache/gpu.hpp"

namespace unicache::gpu::detail {

class device_kernel : public compiled_kernel {
 public:
  ~device_kernel() override;
  device_kernel(const device_kernel&) = delete;
  device_kernel& operator=(const device_kernel&) = delete;

  std::vector<kernel_binary> binaries() const override;

 protected:
  explicit device_kernel(const device& d) : device_(d) {}

  // The kernel path's kernel for `src` on `e`, kept for this kernel's life
  // (and after, until the work that launched it is done).
  const kernel* add_program(const engine& e, const kernel_source& src, const std::vector<kernel_binary>& preloaded);
  // The same for a kernel the kernel cache may hold already under `config`
  // (its kernel_source::config): the source, made by `make`, is generated
  // only when it does not. A GEMM's source text was the largest part of a
  // new shape's compile() (43-46% of it in a profile).
  template <class MakeSource>
  const kernel* add_program(const engine& e, const std::string& config, MakeSource&& make,
                            const std::vector<kernel_binary>& preloaded) {
    if (auto hit = kernel_if_cached(device_.cache_owner(), e.scope(), config)) {
      programs_.push_back(std::move(hit));
      return programs_.back().get();
    }
    return add_program(e, make(), preloaded);
  }
  // Before an execution's launches: an earlier asynchronous failure on the
  // stream is reported (stream_error).
  void begin(const stream& s) const { stream_access::report_failure(device_, s); }
  // Enqueues `k` (nothing for an empty launch).
  void launch(const kernel& k, const stream& s, const kernel_args& args, const launch_dims& dims) const {
    if (!dims.empty()) device_.launch(k, s, args, dims);
  }
  // After an execution's launches: one event, noted on this kernel and on
  // `used` (device memory of the core the launches read).
  void end(const stream& s, device_memory* used = nullptr) const;

  // An execution in progress: whatever it enqueued before an exception is
  // still noted as a use (or, if even that fails, waited for), so nothing it
  // reads is freed under it.
  class execution {
   public:
    execution(const device_kernel& k, const stream& s) : kernel_(k), stream_(s) { k.begin(s); }
    ~execution();
    execution(const execution&) = delete;
    execution& operator=(const execution&) = delete;
    void uses(device_memory* m) { used_ = m; }
    // The launches are enqueued: records the event (errors reach the caller).
    void finish() {
      finished_ = true;
      kernel_.end(stream_, used_);
    }

   private:
    const device_kernel& kernel_;
    const stream& stream_;
    device_memory* used_ = nullptr;
    bool finished_ = false;
  };

  const device& device_;

 private:
  std::vector<std::shared_ptr<const kernel>> programs_;
  mutable use_list uses_;
};

// The launch of `global` work-items in groups of `local`, checked against
// the device's limits (a compile error names `what`).
launch_dims checked_dims(const device& d, const std::array<std::size_t, 3>& global,
                         const std::array<std::size_t, 3>& local, const char* what);

}  // namespace unicache::gpu::detail
