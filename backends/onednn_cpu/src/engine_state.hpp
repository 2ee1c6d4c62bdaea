// What a unicache engine and stream of the oneDNN CPU backend hold: the
// oneDNN engine and stream every kernel runs with.
#pragma once

#include <oneapi/dnnl/dnnl.hpp>

namespace unicache::onednn_cpu::detail {

struct engine_state {
  dnnl::engine eng;
};
struct stream_state {
  dnnl::stream strm;
};

}  // namespace unicache::onednn_cpu::detail
