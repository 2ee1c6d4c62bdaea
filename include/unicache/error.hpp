// unicache/error.hpp — the one base of every exception the library throws.
//
//   try {
//     auto cp = unicache::compile(partition, shapes, engine);
//     cp.execute(stream, inputs, outputs);
//   } catch (const unicache::compile_error& e) {   // this partition cannot be compiled here
//   } catch (const unicache::execute_error& e) {   // running it failed
//   } catch (const unicache::error& e) {           // anything else from unicache
//   }
//
// Each concept has its own type, declared beside it: graph_error (graph.hpp),
// compile_error and execute_error (compiler.hpp), cache_error (cache.hpp),
// store_error (store.hpp), and a backend's own refinements (opencl.hpp).
// Every message names what failed and, where there is one, what to do.
// Exceptions a user's callback throws (a get_or_build builder, say) reach the
// caller as they are, not wrapped.
#pragma once

#include <stdexcept>

namespace unicache {

class error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace unicache
