// What the C interface's source files share: handles, argument checks and
// error translation. Internal to libunicache_c.
#pragma once

#include <cstring>
#include <exception>
#include <memory>
#include <new>
#include <string>
#include <vector>

#include "unicache/cache.hpp"
#include "unicache/compiler.hpp"
#include "unicache/graph.hpp"
#include "unicache/store.hpp"
#include "unicache/unicache.h"

namespace unicache::c_api {

// Handles are registered while alive, so that a destroy of a handle
// destroyed before is reported instead of freeing twice.
void register_handle(const void* h);
bool unregister_handle(const void* h);
bool is_live(const void* h);

// This thread's message for its last failed call.
std::string& last_error();

// An error the C layer raises itself.
struct c_error {
  unicache_status_t status;
  std::string message;
};
[[noreturn]] void raise(unicache_status_t status, std::string message);
// Records `message` as this thread's last error (a fixed one if even that
// cannot be allocated) and returns `status`. Never throws.
unicache_status_t fail(unicache_status_t status, const char* message) noexcept;
inline unicache_status_t fail(unicache_status_t status, const std::string& message) noexcept {
  return fail(status, message.c_str());
}

// Runs `body`, turning every exception into a status and a message.
template <typename Body>
unicache_status_t guarded(Body&& body) noexcept {
  try {
    body();
    return UNICACHE_SUCCESS;
  } catch (const c_error& e) {
    return fail(e.status, e.message);
  } catch (const graph_error& e) {
    return fail(UNICACHE_INVALID_GRAPH, e.what());
  } catch (const compile_error& e) {
    return fail(UNICACHE_COMPILE_FAILED, e.what());
  } catch (const execute_error& e) {
    return fail(UNICACHE_EXECUTE_FAILED, e.what());
  } catch (const cache_error& e) {
    return fail(UNICACHE_CACHE_ERROR, e.what());
  } catch (const store_error& e) {
    return fail(UNICACHE_STORE_ERROR, e.what());
  } catch (const invalid_argument& e) {
    return fail(UNICACHE_INVALID_ARGUMENT, e.what());
  } catch (const std::bad_alloc&) {
    return fail(UNICACHE_OUT_OF_MEMORY, "out of memory");
  } catch (const std::exception& e) {
    return fail(UNICACHE_RUNTIME_ERROR, e.what());
  } catch (...) {
    return fail(UNICACHE_RUNTIME_ERROR, "an unknown exception");
  }
}

template <typename T>
T* need(T* p, const char* what) {
  if (!p) raise(UNICACHE_INVALID_ARGUMENT, std::string(what) + " is NULL");
  return p;
}

// The size-query pattern: `data` NULL asks the size; otherwise *size is the
// buffer's capacity. A string's size includes its NUL.
void copy_out(const void* from, std::size_t bytes, void* data, std::size_t* size);
void copy_out(const std::string& s, char* data, std::size_t* size);

inline constexpr std::uint32_t kGraphMagic = 0x47524150, kEngineMagic = 0x454e4749, kStreamMagic = 0x5354524d,
                               kCompiledMagic = 0x434f4d50;

template <typename H>
H* live(H* h, std::uint32_t magic, const char* what) {
  if (!h || !is_live(h) || h->magic != magic) raise(UNICACHE_INVALID_HANDLE, std::string("not a live ") + what);
  return h;
}
template <typename H>
unicache_status_t destroy(H* h, std::uint32_t magic, const char* what) {
  if (!h) return UNICACHE_SUCCESS;
  return guarded([&] {
    // Checked before it is unregistered: a handle of another type passed
    // here stays registered and usable.
    if (!is_live(h) || h->magic != magic) {
      raise(UNICACHE_INVALID_HANDLE, std::string("not a live ") + what + " (destroyed twice, or another type?)");
    }
    if (!unregister_handle(h)) raise(UNICACHE_INVALID_HANDLE, std::string("not a live ") + what);
    h->magic = 0;
    delete h;
  });
}
template <typename H>
H* created(std::unique_ptr<H> h) {
  register_handle(h.get());
  return h.release();
}

// Between the C enums and the C++ ones; the to_ functions raise
// UNICACHE_INVALID_ARGUMENT for a value outside the C enum.
engine_kind to_kind(unicache_engine_kind_t k);
unicache_engine_kind_t from_kind(engine_kind k);
eviction_policy to_policy(unicache_policy_t p);
unicache_policy_t from_policy(eviction_policy p);
unified_cache& cache_of(unicache_cache_t c);
op_kind to_op(unicache_op_kind_t k);
unicache_logical_tensor_t to_c(const logical_tensor& t);
// The partition behind a handle (UNICACHE_INVALID_HANDLE for NULL), and
// tensor `index` of `list` as C sees it (UNICACHE_INVALID_ARGUMENT past the end).
const partition& part(unicache_partition_t p);
void tensor_at(const std::vector<logical_tensor>& list, size_t index, unicache_logical_tensor_t* tensor);
// A shape from the C arrays, checked (ndims in range, dims not NULL).
std::vector<std::int64_t> shape_of(int32_t ndims, const int64_t* dims);

// A new engine handle, and the engine or stream behind a handle, checked to
// be of the backend named `backend` ("opencl", "cuda").
::unicache_engine* engine_handle(unicache::engine e);
const unicache::engine& backend_engine(::unicache_engine* handle, const char* backend);
const unicache::stream& backend_stream(::unicache_stream* handle, const char* backend);

}  // namespace unicache::c_api

// The handle types (declared in unicache.h as opaque structs).
struct unicache_partition {
  const unicache::partition* p;
};
struct unicache_graph {
  std::uint32_t magic = unicache::c_api::kGraphMagic;
  unicache::graph g;
  std::vector<unicache_partition> partitions;
};
struct unicache_engine {
  std::uint32_t magic = unicache::c_api::kEngineMagic;
  unicache::engine e;
};
struct unicache_stream {
  std::uint32_t magic = unicache::c_api::kStreamMagic;
  unicache::stream s;
};
struct unicache_compiled_partition {
  std::uint32_t magic = unicache::c_api::kCompiledMagic;
  unicache::compiled_partition cp;
};
