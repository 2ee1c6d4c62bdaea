// unicache/error.hpp — the one base of every exception the library throws.
// For: users and backend authors.
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
// store_error (store.hpp), remote_error (remote.hpp), and a backend's own
// refinements (opencl_error in opencl.hpp, cuda_error in cuda.hpp). A
// malformed value that belongs to no one concept (a setting, a URL, a secret
// file, bytes that should hold a serialized field) is invalid_argument, below.
// Every message names what failed and, where there is one, what to do.
//
// What else can reach a caller, by design (the documented exceptions):
// - std::bad_alloc, when memory runs out;
// - whatever a caller's own code throws, as it is, not wrapped: a
//   get_or_build builder, a constant registry's reader or packer, a
//   kernel_builder's build or load (an eviction callback's exception is
//   dropped with a warning: it runs on whichever thread evicted).
// The test test_error_contract calls every public entry point with bad input
// and accepts nothing else.
#pragma once

#include <stdexcept>

namespace unicache {

class error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A value the caller passed is malformed or out of range; the message names
// the value (never quoting a password or a secret) and what is wrong. The
// call changed nothing.
class invalid_argument : public error {
 public:
  using error::error;
};

}  // namespace unicache
