// libFuzzer target for the graph JSON reader (graph_from_json), whose input
// comes from files and the network. Invariants: never crashes; a refusal is
// a graph_error whose message starts "graph JSON: "; an accepted document
// writes back (to_json) into text that reads to the same partitions, and
// partition_input_shapes on each of its requests succeeds or throws graph_error.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "unicache/graph.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  unicache::graph_document doc;
  try {
    doc = unicache::graph_from_json(text);
  } catch (const unicache::graph_error& e) {
    if (std::string_view(e.what()).substr(0, 12) != "graph JSON: ") std::abort();
    return 0;
  }
  const std::string written = unicache::to_json(doc.g, doc.requests);
  const unicache::graph_document again = unicache::graph_from_json(written);
  if (again.g.partitions().size() != doc.g.partitions().size() || again.requests != doc.requests) std::abort();
  for (std::size_t i = 0; i < doc.g.partitions().size(); ++i) {
    if (again.g.partitions()[i].fingerprint() != doc.g.partitions()[i].fingerprint()) std::abort();
  }
  if (unicache::to_json(again.g, again.requests) != written) std::abort();
  for (const unicache::shape_request& request : doc.requests) {
    try {
      (void)unicache::partition_input_shapes(doc.g, request);
    } catch (const unicache::graph_error&) {
    }
  }
  return 0;
}
