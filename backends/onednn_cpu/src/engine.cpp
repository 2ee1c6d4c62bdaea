// onednn_cpu::make_engine: the backend registered once, and one dnnl::engine
// per CPU device index for the whole process.
#include <memory>
#include <mutex>
#include <oneapi/dnnl/dnnl.hpp>
#include <string>
#include <unordered_map>

#include "backend.hpp"
#include "engine_state.hpp"
#include "packed_weights.hpp"
#include "unicache/compiler.hpp"
#include "unicache/onednn_cpu.hpp"

namespace unicache::onednn_cpu {

engine make_engine(int index) {
  static detail::onednn_cpu_backend* const b = [] {
    auto* created = new detail::onednn_cpu_backend();
    register_backend(created);
    return created;
  }();
  // One dnnl::engine per device index for the whole process: cached
  // primitives and packed weights belong to the engine that made them, and
  // the cache scope (cpu, index, 0) must always mean that same engine.
  static std::mutex mu;
  static auto* engines = new std::unordered_map<int, std::shared_ptr<detail::engine_state>>();
  std::lock_guard lock(mu);
  auto& state = (*engines)[index];
  if (!state) {
    try {
      auto created = std::make_shared<detail::engine_state>();
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
