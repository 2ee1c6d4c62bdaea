// The backend's registry of packed constant weights, and the reorder that
// packs a weight into a primitive's layout on a miss.
#include "packed_weights.hpp"

#include <chrono>

#include "engine_state.hpp"
#include "primitives.hpp"
#include "unicache/cache_key.hpp"

namespace unicache::onednn_cpu::detail {

weight_registry& weights() {
  static weight_registry* const r = new weight_registry(constant_tensor_cache(), cache_owner_id);
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
             run_primitive(dnnl::reorder(dnnl::reorder::primitive_desc(user, p->mem, primitive_attributes())), strm,
                           {{DNNL_ARG_FROM, user}, {DNNL_ARG_TO, p->mem}});
             strm.wait();
             counters& c = stats_counters();
             c.weights_packed.fetch_add(1, std::memory_order_relaxed);
             c.pack_ns.fetch_add(ns_since(start), std::memory_order_relaxed);
             return p;
           })
      ->mem;
}

}  // namespace unicache::onednn_cpu::detail
