// The error contract (unicache/error.hpp): every public entry point, given
// bad input, fails with an exception derived from unicache::error (or
// std::bad_alloc), never with another type, and the calls documented as
// never throwing do not. A frontend that catches unicache::error catches
// everything the library throws. Public headers only, as a user has them.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <future>
#include <limits>
#include <new>
#include <string>
#include <thread>
#include <typeinfo>
#include <vector>

#include "unicache/backend.hpp"
#include "unicache/backend_support.hpp"
#include "unicache/cache.hpp"
#include "unicache/cache_key.hpp"
#include "unicache/compiler.hpp"
#include "unicache/config.hpp"
#include "unicache/constant_registry.hpp"
#include "unicache/error.hpp"
#include "unicache/graph.hpp"
#include "unicache/kernel_path.hpp"
#include "unicache/remote.hpp"
#include "unicache/specialization.hpp"
#include "unicache/store.hpp"
#ifdef UNICACHE_TEST_WITH_ONEDNN
#include "unicache/onednn_cpu.hpp"
#endif
#ifdef UNICACHE_TEST_WITH_OPENCL
#include "unicache/opencl.hpp"
#endif
#ifdef UNICACHE_TEST_WITH_CUDA
#include "unicache/cuda.hpp"
#endif

namespace unicache {
namespace {

// Calls `f`, which must throw a unicache::error (when `must_throw`) and may
// throw nothing else but std::bad_alloc.
template <typename F>
void expect_library_error(const std::string& what, F&& f, bool must_throw = true) {
  try {
    f();
    if (must_throw) ADD_FAILURE() << what << ": no exception";
  } catch (const error& e) {
    EXPECT_NE(std::string(e.what()), "") << what << ": an error without a message";
  } catch (const std::bad_alloc&) {
  } catch (const std::exception& e) {
    ADD_FAILURE() << what << ": threw " << typeid(e).name() << " (not a unicache::error): " << e.what();
  } catch (...) {
    ADD_FAILURE() << what << ": threw something that is not even a std::exception";
  }
}

// The value of an enum that names none of its enumerators.
template <typename E>
E out_of_range() {
  return static_cast<E>(0x7f);
}

class scratch_dir {
 public:
  scratch_dir() {
    std::string pattern = (std::filesystem::temp_directory_path() / "unicache-contract-XXXXXX").string();
    path_ = ::mkdtemp(pattern.data()) ? pattern : "";
  }
  ~scratch_dir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

TEST(ErrorContract, Configuration) {
  expect_library_error("set_kernel_shapes(out of range)", [] { set_kernel_shapes(out_of_range<kernel_shapes>()); });
  expect_library_error("set_constant_check(out of range)", [] { set_constant_check(out_of_range<constant_check>()); });
  expect_library_error("set_specialize_settings(threads 65)", [] { set_specialize_settings({65, 32, 1.0, 0.5}); });
  expect_library_error("set_specialize_settings(max 1025)", [] { set_specialize_settings({1, 1025, 1.0, 0.5}); });
  expect_library_error("set_specialize_settings(nan threshold)",
                       [] { set_specialize_settings({1, 32, std::numeric_limits<double>::quiet_NaN(), 0.5}); });
  expect_library_error("set_specialize_settings(saving 2)", [] { set_specialize_settings({1, 32, 1.0, 2.0}); });
  // The parsers never throw: they say what is wrong.
  const std::string flood(100000, '\xff');
  EXPECT_FALSE(parse_capacity_spec(flood).ok());
  EXPECT_FALSE(parse_capacity_spec("cpu:99999999999999999999999").ok());
  EXPECT_FALSE(parse_switch(flood).has_value());
  EXPECT_FALSE(parse_policy(flood).has_value());
  EXPECT_FALSE(parse_kernel_shapes(flood).has_value());
  EXPECT_FALSE(parse_constant_check(flood).has_value());
  EXPECT_EQ(to_string(out_of_range<kernel_shapes>()), "?");
  EXPECT_EQ(to_string(out_of_range<eviction_policy>()), "?");
}

TEST(ErrorContract, Caches) {
  cache_config too_large;
  too_large.cpu.capacity_mb = max_capacity_mb + 1;
  expect_library_error("unified_cache(capacity over the bound)", [&] { unified_cache c(too_large); });
  cache_config bad_policy;
  bad_policy.gpu.policy = out_of_range<eviction_policy>();
  expect_library_error("unified_cache(policy out of range)", [&] { unified_cache c(bad_policy); });

  unified_cache cache;
  const cache_scope bad_kind{out_of_range<engine_kind>(), 0, 0};
  std::promise<cache_value> promise;
  expect_library_error("get_or_add(invalid future)", [&] { cache.get_or_add({}, 1, "k", 1, 1, cache_future()); });
  expect_library_error("get_or_add(kind out of range)",
                       [&] { cache.get_or_add(bad_kind, 1, "k", 1, 1, promise.get_future().share()); });
  expect_library_error("get_or_build(kind out of range)", [&] {
    cache.get_or_build<int>(bad_kind, 1, "k", 1, [] { return std::make_shared<int>(1); });
  });
  expect_library_error("lookup(kind out of range): a miss", [&] { EXPECT_FALSE(cache.lookup<int>(bad_kind, 1, "k")); },
                       /*must_throw=*/false);
  expect_library_error("contains(kind out of range): false", [&] { EXPECT_FALSE(cache.contains(bad_kind, 1, "k")); },
                       false);
  expect_library_error("set_capacity(over the bound)", [&] { cache.set_capacity(engine_kind::cpu, max_capacity_mb + 1); });
  expect_library_error("set_capacity(kind out of range)", [&] { cache.set_capacity(out_of_range<engine_kind>(), 1); });
  expect_library_error("set_capacity(policy out of range)",
                       [&] { cache.set_capacity(engine_kind::gpu, 1, out_of_range<eviction_policy>()); });
  expect_library_error("set_capacity(device, over the bound)",
                       [&] { cache.set_capacity(engine_kind::gpu, 3, max_capacity_mb + 1); });
  expect_library_error("set_capacity(device, kind out of range)",
                       [&] { cache.set_capacity(out_of_range<engine_kind>(), 3, 1); });
  expect_library_error("evict_device(kind out of range)", [&] { cache.evict_device(out_of_range<engine_kind>(), 0, 1); });
  expect_library_error("evict_scope(kind out of range)", [&] { cache.evict_scope(bad_kind); });
  expect_library_error("add_eviction_callback(empty)", [&] { cache.add_eviction_callback(1, eviction_callback()); });
  expect_library_error("remove_eviction_callback(unknown): false",
                       [&] { EXPECT_FALSE(cache.remove_eviction_callback({1, 12345})); }, false);
  register_owner(0x7E57C001, "contract_owner");
  expect_library_error("register_owner(taken)", [] { register_owner(0x7E57C001, "another_owner"); });

  // A get_or_add caller that destroys its promise unset while get_or_build
  // waits on it: the waiter is told by the cache, not by std::future_error.
  {
    auto abandoned = std::make_unique<std::promise<cache_value>>();
    ASSERT_FALSE(cache.get_or_add({}, 2, "abandoned", 1, 1, abandoned->get_future().share()).valid());
    const std::uint64_t waits = cache.stats().waits;
    std::thread waiter([&] {
      expect_library_error("get_or_build(waiting on an abandoned promise)", [&] {
        cache.get_or_build<int>({}, 2, "abandoned", 1, [] { return std::make_shared<int>(1); });
      });
    });
    while (cache.stats().waits == waits) std::this_thread::yield();  // the waiter waits
    abandoned.reset();
    waiter.join();
  }
}

TEST(ErrorContract, SerializedFields) {
  cache_key key;
  key.add(std::uint32_t{7}).add("text");
  const std::string bytes(key.bytes());
  expect_library_error("cache_key_reader: another width", [&] { cache_key_reader(bytes).read<std::uint64_t>(); });
  expect_library_error("cache_key_reader: truncated", [&] {
    cache_key_reader r(std::string_view(bytes).substr(0, bytes.size() - 2));
    r.read<std::uint32_t>();
    r.read_text();
  });
  expect_library_error("cache_key_reader: past the end", [] { cache_key_reader("").read_bool(); });
}

TEST(ErrorContract, Graphs) {
  expect_library_error("finalize: an op on an undeclared tensor", [] {
    graph g;
    auto x = g.tensor({2, 2});
    logical_tensor ghost = x;
    ghost.id = 99;
    g.add_op(op_kind::relu, {ghost}, {x});
    g.finalize();
  });
  expect_library_error("finalize: matmul K mismatch", [] {
    graph g;
    auto a = g.tensor({2, 3}), b = g.tensor({4, 5}), c = g.tensor({2, 5});
    g.add_op(op_kind::matmul, {a, b}, {c});
    g.finalize();
  });
  expect_library_error("finalize: op kind out of range", [] {
    graph g;
    auto a = g.tensor({2}), b = g.tensor({2});
    g.add_op(out_of_range<op_kind>(), {a}, {b});
    g.finalize();
  });
  expect_library_error("partitions() before finalize", [] { graph().partitions(); });
  expect_library_error("tensor: a dimension below -1", [] { graph().tensor({-5, 2}); });
  expect_library_error("tensor: a dimension of 0", [] { graph().tensor({0}); });
  expect_library_error("tensor_of(unknown id)", [] { graph().tensor_of(42); });
  expect_library_error("matmul_output_shape(mismatch)", [] { matmul_output_shape({2, 3}, {4, 5}, false, false, "t"); });
  expect_library_error("broadcast_shape(mismatch)", [] { broadcast_shape({2, 3}, {4}, "t"); });
  expect_library_error("graph_from_json: not JSON", [] { graph_from_json("[[[["); });
  expect_library_error("graph_from_json: an undeclared tensor", [] {
    graph_from_json(R"({"format": "unicache-graph", "version": 1, "tensors": [],)"
                    R"( "ops": [{"kind": "ReLU", "inputs": [1], "outputs": [2]}]})");
  });
  expect_library_error("to_json: a request for a tensor that is not declared", [] { to_json(graph(), {{{7, {1}}}}); });
  expect_library_error("partition_input_shapes before finalize", [] { partition_input_shapes(graph(), {}); });
}

graph relu_graph() {
  graph g;
  auto x = g.tensor({-1, 8}), y = g.tensor({-1, 8});
  g.add_op(op_kind::relu, {x}, {y});
  g.finalize();
  return g;
}

TEST(ErrorContract, CompilingWithoutABackend) {
  const graph g = relu_graph();
  const partition& p = g.partitions().front();
  const engine none;
  expect_library_error("compile(engine without backend)", [&] { compile(p, {{2, 8}}, none); });
  expect_library_error("get_cache_blob_id(engine without backend)", [&] { get_cache_blob_id(p, {{2, 8}}, none); });
  expect_library_error("compile_from_cache_blob(engine without backend)",
                       [&] { compile_from_cache_blob(p, {{2, 8}}, none, {}); });
  expect_library_error("make_stream(engine without backend)", [&] { make_stream(none); });
  const compiled_partition empty;
  expect_library_error("inputs() of an empty compiled partition", [&] { empty.inputs(); });
  expect_library_error("get_cache_blob() of an empty compiled partition", [&] { empty.get_cache_blob(); });
  stream s;
  expect_library_error("execute() of an empty compiled partition", [&] { empty.execute(s, {}, {}); });
  expect_library_error("engine::native of an engine without one", [&] { none.native<int>(); });
  expect_library_error("stream::native of a stream without one", [&] { s.native<int>(); });
  expect_library_error("register_backend(nullptr)", [] { register_backend(nullptr); });
  expect_library_error("compile(a default partition)", [&] { compile(partition(), {}, none); });
  EXPECT_EQ(find_backend(std::string(1000, 'x')), nullptr);
}

TEST(ErrorContract, Store) {
  scratch_dir dir;
  store_config config;
  config.directory = dir.path() + "/store";
  kernel_store store(config);
  expect_library_error("set_capacity_mb(over the bound)",
                       [&] { store.set_capacity_mb(std::numeric_limits<std::uint64_t>::max()); });
  expect_library_error("set_remote(malformed URL)", [&] { store.set_remote("http://example.com"); });
  expect_library_error("set_remote(100 KB URL)", [&] { store.set_remote("redis://" + std::string(100000, 'h')); });
  expect_library_error("set_remote(missing secret file)",
                       [&] { store.set_remote("redis://127.0.0.1:1", dir.path() + "/no-such-secret"); });
  const std::string fifo = dir.path() + "/fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  expect_library_error("set_remote(a FIFO as secret file)", [&] { store.set_remote("redis://127.0.0.1:1", fifo); });

  // get, put and remove never throw, whatever they are given.
  const device_identity device{"p", "d", "v", "1"};
  const std::string huge_key(2 << 20, 'k');
  expect_library_error("get/put/remove(odd keys)", [&] {
    EXPECT_FALSE(store.get(device, huge_key).has_value());
    const unsigned char b[1] = {0};
    EXPECT_FALSE(store.put(device, huge_key, b));
    EXPECT_FALSE(store.remove(device, huge_key));
    EXPECT_FALSE(store.get({}, "").has_value());
  }, false);

  // A store that cannot open its directory is off: maintenance says so.
  store_config unusable;
  unusable.directory = fifo + "/store";
  kernel_store off(unusable);
  expect_library_error("stats() of a disabled store", [&] { off.stats(); });
  expect_library_error("list() of a disabled store", [&] { off.list(); });
  expect_library_error("verify() of a disabled store", [&] { off.verify(false); });
  expect_library_error("prune() of a disabled store", [&] { off.prune(0, 0); });
  expect_library_error("clear() of a disabled store", [&] { off.clear(); });
  expect_library_error("export_bundle() of a disabled store", [&] { off.export_bundle(dir.path() + "/b", {}); });
  expect_library_error("import_bundle() of a disabled store", [&] { off.import_bundle(dir.path() + "/b"); });
  expect_library_error("import_bundle(a FIFO)", [&] { store.import_bundle(fifo); });
  expect_library_error("import_bundle(a directory)", [&] { store.import_bundle(dir.path()); });
  expect_library_error("export_bundle(into a FIFO's place)", [&] { store.export_bundle(fifo + "/b", {}); });
  expect_library_error("export_bundle(missing secret file)",
                       [&] { store.export_bundle(dir.path() + "/b", {}, dir.path() + "/no-such-secret"); });

  const byte_vector garbage(64, 0xAB);
  expect_library_error("deserialize_blob(garbage)", [&] { deserialize_blob(device, garbage); });
  expect_library_error("deserialize_blob(empty)", [&] { deserialize_blob(device, {}); });
  const unsigned char one[1] = {1};
  const byte_vector blob = serialize_blob(device, "key", one);
  expect_library_error("deserialize_blob(another device)", [&] { deserialize_blob({"p", "d", "v", "2"}, blob); });
  expect_library_error("deserialize_blob(truncated)",
                       [&] { deserialize_blob(device, byte_span(blob.data(), blob.size() - 1)); });
}

#if UNICACHE_TEST_WITH_REMOTE
TEST(ErrorContract, Remote) {
  for (const char* url : {"", "redis://", "redis://h:0", "redis://h:70000", "redis://h/x", "redis://h?nope=1",
                          "redis://h?prefix=a%zz", "memcached://h"}) {
    expect_library_error(std::string("parse_redis_url(") + url + ")", [&] { parse_redis_url(url); });
  }
  expect_library_error("remote_maintenance(malformed URL)", [] { remote_maintenance m("redis:///"); });
  // Port 1 on loopback: nothing listens there, so the server cannot be used.
  remote_maintenance absent("redis://127.0.0.1:1?connect_timeout_ms=50&timeout_ms=50");
  expect_library_error("remote_maintenance::stats, no server", [&] { absent.stats(); });
  expect_library_error("remote_maintenance::list, no server", [&] { absent.list(); });
  expect_library_error("remote_maintenance::verify, no server", [&] { absent.verify(true); });
  expect_library_error("remote_maintenance::clear, no server", [&] { absent.clear(); });
}
#endif

// A backend that claims another owner's id.
class claiming_backend final : public backend {
 public:
  claiming_backend(const char* name, owner_id owner) : name_(name), owner_(owner) {}
  const char* name() const override { return name_; }
  engine_kind kind() const override { return engine_kind::cpu; }
  owner_id cache_owner() const override { return owner_; }
  std::shared_ptr<const compiled_kernel> compile(const partition&, const std::vector<logical_tensor>&,
                                                 const std::vector<logical_tensor>&, const engine&,
                                                 const std::vector<kernel_binary>&) override {
    throw compile_error("claiming_backend compiles nothing");
  }
  stream make_stream(const engine& e) override { return stream(e, nullptr); }
  device_identity identity(const engine&) const override { return {"contract", name_, "0", "0"}; }

 private:
  const char* name_;
  owner_id owner_;
};

TEST(ErrorContract, RegistrationClaims) {
  static claiming_backend compilers("contract_claims_compiled_partitions", compiled_partition_owner);
  expect_library_error("register_backend(the compiler's owner id)", [] { register_backend(&compilers); });
  EXPECT_EQ(find_backend("contract_claims_compiled_partitions"), nullptr);
  static claiming_backend first("contract_first", 0x7E57C003), same_name("contract_first", 0x7E57C004);
  register_backend(&first);
  expect_library_error("register_backend(a name taken)", [] { register_backend(&same_name); });
  static claiming_backend same_id("contract_second", 0x7E57C003);
  expect_library_error("register_backend(an owner id taken)", [] { register_backend(&same_id); });
  expect_library_error("compile through a backend that refuses", [] {
    graph g;
    auto x = g.tensor({2}), y = g.tensor({2});
    g.add_op(op_kind::relu, {x}, {y});
    g.finalize();
    compile(g.partitions().front(), {{2}}, engine(&first, 0, 0, nullptr));
  });
}

// A kernel builder whose builds fail the way a backend's do.
class failing_builder final : public kernel_builder {
 public:
  const char* backend_name() const override { return "contract"; }
  device_identity identity() const override { return {"contract", "none", "0", "0"}; }
  std::unique_ptr<device_program> build(const kernel_source& src) const override {
    throw compile_error("contract: " + src.kernel_name + " does not build");
  }
  std::unique_ptr<device_program> load(const kernel_source&, byte_span) const override { return nullptr; }
};

TEST(ErrorContract, KernelPathPassesTheBackendsErrorOn) {
  kernel_source src{"contract-config", "contract-c", "int main;", "", "k", ""};
  expect_library_error("get_or_build_kernel(a build that fails)",
                       [&] { get_or_build_kernel(0x7E57C002, cache_scope{}, failing_builder(), src, {}); });
}

#ifdef UNICACHE_TEST_WITH_ONEDNN
TEST(ErrorContract, OnednnCpu) {
  expect_library_error("onednn_cpu::make_engine(-1)", [] { onednn_cpu::make_engine(-1); });
  expect_library_error("onednn_cpu::make_engine(1000)", [] { onednn_cpu::make_engine(1000); });
  const engine e = onednn_cpu::make_engine();
  const graph g = relu_graph();
  const partition& p = g.partitions().front();
  expect_library_error("compile(a shape of another rank)", [&] { compile(p, {{2, 8, 1}}, e); });
  expect_library_error("compile(a negative size)", [&] { compile(p, {{-3, 8}}, e); });
  expect_library_error("compile(no shapes)", [&] { compile(p, {}, e); });
  expect_library_error("compile_from_cache_blob(garbage)", [&] {
    const byte_vector garbage(100, 7);
    compile_from_cache_blob(p, {{2, 8}}, e, garbage);
  });
  const compiled_partition cp = compile(p, {{2, 8}}, e);
  stream s = make_stream(e);
  std::vector<float> x(16), y(16);
  expect_library_error("execute(too few tensors)", [&] { cp.execute(s, {}, {{cp.outputs()[0], y.data()}}); });
  expect_library_error("execute(a tensor of another shape)", [&] {
    logical_tensor other = cp.inputs()[0];
    other.shape = {4, 8};
    cp.execute(s, {{other, x.data()}}, {{cp.outputs()[0], y.data()}});
  });
  expect_library_error("make_stream", [&] { make_stream(e); }, /*must_throw=*/false);
  expect_library_error("compile(a default partition)", [&] { compile(partition(), {}, e); });
  expect_library_error("engine::native<wrong type>", [&] { e.native<double>(); });
  expect_library_error("stream::native<wrong type>", [&] { s.native<double>(); });
  expect_library_error("engine::native_shared<wrong type>", [&] { e.native_shared<float>(); });
}
#endif

#ifdef UNICACHE_TEST_WITH_OPENCL
TEST(ErrorContract, Opencl) {
  expect_library_error("opencl::make_engine(null device)", [] { opencl::make_engine(nullptr, nullptr); });
  expect_library_error("opencl::get_engine_cache_blob_id(null device)",
                       [] { opencl::get_engine_cache_blob_id(nullptr); });
  expect_library_error("opencl::make_engine_from_cache_blob(null device)",
                       [] { opencl::make_engine_from_cache_blob(nullptr, nullptr, {}); });
  const engine none;
  expect_library_error("opencl::info(not an OpenCL engine)", [&] { opencl::info(none); });
  expect_library_error("opencl::native_context(not an OpenCL engine)", [&] { opencl::native_context(none); });
  expect_library_error("opencl::make_buffer(not an OpenCL engine)", [&] { opencl::make_buffer(none, 16); });
  expect_library_error("opencl::native_queue(not an OpenCL stream)", [] { opencl::native_queue(stream()); });
  expect_library_error("opencl::list_devices", [] { opencl::list_devices(); }, false);
  if (cl_device_id device = opencl::default_device()) {
    const engine e = opencl::make_engine();
    const byte_vector garbage(100, 7);
    expect_library_error("opencl::make_engine_from_cache_blob(garbage)", [&] {
      opencl::make_engine_from_cache_blob(device, opencl::native_context(e), garbage);
    });
    expect_library_error("engine::native<wrong type> of an OpenCL engine", [&] { e.native<double>(); });
  }
}
#endif

#ifdef UNICACHE_TEST_WITH_CUDA
TEST(ErrorContract, Cuda) {
  expect_library_error("cuda::make_engine(-1)", [] { cuda::make_engine(-1); });
  expect_library_error("cuda::make_engine(ordinal 1000)", [] { cuda::make_engine(1000); });
  expect_library_error("cuda::make_engine(null context)", [] { cuda::make_engine(static_cast<CUcontext>(nullptr)); });
  expect_library_error("cuda::get_engine_cache_blob_id(-1)", [] { cuda::get_engine_cache_blob_id(-1); });
  expect_library_error("cuda::make_engine_from_cache_blob(garbage)", [] {
    const byte_vector garbage(100, 7);
    cuda::make_engine_from_cache_blob(0, garbage);
  });
  const engine none;
  expect_library_error("cuda::info(not a CUDA engine)", [&] { cuda::info(none); });
  expect_library_error("cuda::make_buffer(not a CUDA engine)", [&] { cuda::make_buffer(none, 16); });
  expect_library_error("cuda::make_stream(not a CUDA engine)", [&] { cuda::make_stream(none, nullptr); });
  expect_library_error("cuda::native_stream(not a CUDA stream)", [] { cuda::native_stream(stream()); });
  expect_library_error("cuda::list_devices", [] { cuda::list_devices(); }, false);
  expect_library_error("cuda::available", [] { cuda::available(); }, false);
}
#endif

TEST(ErrorContract, BackendSupportNeverThrows) {
  expect_library_error("support::quoted", [] { support::quoted(std::string(100000, '\x01'), 32); }, false);
  expect_library_error("support::environment_variable", [] { support::environment_variable("UNICACHE_NOT_SET_EVER"); },
                       false);
}

}  // namespace
}  // namespace unicache
