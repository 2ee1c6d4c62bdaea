// compile() and compiled partitions against the backend interface, with toy
// backends that record what they were asked: what the compiled-partition
// cache key holds, which errors reach the caller and as which type.
#include <gtest/gtest.h>

#include <atomic>
#include <exception>
#include <string>

#include "mlp_partition.hpp"
#include "unicache/compiler.hpp"
#include "unicache/store.hpp"

namespace unicache {
namespace {

using namespace unicache::testing;

// A backend-specific error with a status, as opencl_error is.
class toy_error : public error {
 public:
  toy_error(const std::string& what, int status) : error(what), status_(status) {}
  int status() const { return status_; }

 private:
  int status_;
};

// Runs nothing; execute() writes the backend's tag into the first output
// float, so a test sees whose kernel ran.
class tagging_kernel final : public compiled_kernel {
 public:
  explicit tagging_kernel(float tag, bool fail) : tag_(tag), fail_(fail) {}
  void execute(stream&, const std::vector<tensor>&, const std::vector<tensor>& outputs) const override {
    if (fail_) throw toy_error("toy: the device refused the launch", 42);
    *static_cast<float*>(outputs[0].data) = tag_;
  }

 private:
  float tag_;
  bool fail_;
};

// A CPU backend that counts its compiles. `compile_fails` makes compile()
// throw a toy_error, `execute_fails` makes the kernel's execute() throw one.
class toy_backend final : public backend {
 public:
  toy_backend(std::string name, float tag, owner_id owner = 0x7E570000) : name_(std::move(name)), tag_(tag), owner_(owner) {}
  const char* name() const override { return name_.c_str(); }
  engine_kind kind() const override { return engine_kind::cpu; }
  owner_id cache_owner() const override { return owner_; }
  std::shared_ptr<const compiled_kernel> compile(const partition&, const std::vector<logical_tensor>&,
                                                 const std::vector<logical_tensor>&, const engine&,
                                                 const std::vector<kernel_binary>&) override {
    ++compiles;
    if (compile_fails) throw toy_error("toy: the driver refused the kernel", 7);
    return std::make_shared<tagging_kernel>(tag_, execute_fails);
  }
  stream make_stream(const engine& e) override { return stream(e, nullptr); }
  device_identity identity(const engine&) const override { return {"toy", name_, "1", "1"}; }
  std::string kernel_configuration(const partition& p, const std::vector<std::vector<std::int64_t>>& shapes,
                                   const engine& e) const override {
    return option + backend::kernel_configuration(p, shapes, e);
  }

  std::atomic<int> compiles{0};
  bool compile_fails = false, execute_fails = false;
  std::string option;  // what a backend option would change in its code

 private:
  std::string name_;
  float tag_;
  owner_id owner_;
};

// Engines of both toy backends share a scope: cpu, device 0, context 0, as
// onednn_cpu's engine does.
engine engine_of(toy_backend& b) { return engine(&b, 0, 0, nullptr); }

// execute() checks tensors against the partition; the toy kernels ignore
// inputs, so the tests pass the right number with null-free placeholders.
float run_mlp(const compiled_partition& cp, const engine& e) {
  stream s = make_stream(e);
  float in = 0, out = 0;
  std::vector<tensor> inputs;
  for (const logical_tensor& t : cp.inputs()) inputs.push_back({t, &in, 0});
  cp.execute(s, inputs, {{cp.outputs()[0], &out, 0}});
  return out;
}

TEST(Registration, ASecondBackendUnderARegisteredNameOrIdIsAnErrorNotAReplacement) {
  constexpr owner_id id = 0x7E570001;
  static toy_backend first("toy_registered", 1.f, id), second("toy_registered", 2.f, 0x7E570002);
  register_backend(&first);
  EXPECT_EQ(owner_name(id), "toy_registered") << "one call names the backend's owner id too";
  EXPECT_NO_THROW(register_backend(&first)) << "the same object again: nothing happens";
  EXPECT_THROW(register_backend(&second), error);
  EXPECT_EQ(find_backend("toy_registered"), &first);
  EXPECT_EQ(owner_name(0x7E570002), "0x7e570002") << "a refused backend names nothing";

  // Another name, but the owner id of a registered backend: refused whole.
  static toy_backend squatter("toy_squatter", 3.f, id);
  EXPECT_THROW(register_backend(&squatter), error);
  EXPECT_EQ(find_backend("toy_squatter"), nullptr);
  EXPECT_EQ(owner_name(id), "toy_registered") << "the first claimant keeps its id";

  EXPECT_NO_THROW(register_owner(id, "toy_registered"));
  EXPECT_THROW(register_owner(id, "another_backend"), cache_error);
  EXPECT_THROW(register_backend(nullptr), invalid_argument);
}

TEST(Registration, PhysicalDevicesHaveOneIdPerKeyAndTheHostCpuIsOne) {
  const int a = physical_device_id(engine_kind::gpu, "pci:0000:17:00.0");
  const int b = physical_device_id(engine_kind::gpu, "pci:0000:65:00.0");
  EXPECT_NE(a, b);
  EXPECT_EQ(physical_device_id(engine_kind::gpu, "pci:0000:17:00.0"), a) << "another API's view of one GPU";
  EXPECT_EQ(physical_device_id(engine_kind::cpu, "opencl:Portable Computing Language/cpu"), host_cpu_device_id);
  EXPECT_EQ(physical_device_id(engine_kind::cpu, "anything"), host_cpu_device_id);
  // An engine keeps the kind it is given, whatever its backend's kind.
  static toy_backend cpu_backend("toy_kinds", 1.f);
  const engine gpu_engine(&cpu_backend, engine_kind::gpu, a, 7, nullptr);
  EXPECT_EQ(gpu_engine.kind(), engine_kind::gpu);
  EXPECT_EQ(gpu_engine.scope().kind, engine_kind::gpu);
  EXPECT_EQ(engine(&cpu_backend, 0, 0, nullptr).kind(), engine_kind::cpu);
}

TEST(Compile, TwoBackendsWithEnginesOfOneScopeNeverShareACompiledPartition) {
  toy_backend first("toy_first", 1.f), second("toy_second", 2.f);
  const graph g = mlp_graph(8, 4, /*constant_weight=*/true);
  const std::vector<std::vector<std::int64_t>> shapes{{3, 8}, {8, 4}, {4}};
  const engine e1 = engine_of(first), e2 = engine_of(second);
  ASSERT_EQ(e1.scope(), e2.scope());

  const compiled_partition a = compile(g.partitions()[0], shapes, e1);
  const compiled_partition b = compile(g.partitions()[0], shapes, e2);
  EXPECT_EQ(first.compiles, 1);
  EXPECT_EQ(second.compiles, 1) << "the second backend was never asked to compile";
  EXPECT_EQ(run_mlp(a, e1), 1.f);
  EXPECT_EQ(run_mlp(b, e2), 2.f) << "executing the second backend's partition ran the first one's kernel";
  EXPECT_NE(a.get_cache_blob_id(), b.get_cache_blob_id());
}

TEST(Compile, AStreamOfAnotherEngineIsAnExecuteErrorNotARunInTheWrongContext) {
  toy_backend first("toy_stream_a", 1.f), second("toy_stream_b", 2.f);
  const graph g = mlp_graph(8, 4, /*constant_weight=*/true);
  const compiled_partition cp = compile(g.partitions()[0], {{3, 8}, {8, 4}, {4}}, engine_of(first));
  float in = 0, out = 0;
  std::vector<tensor> inputs;
  for (const logical_tensor& t : cp.inputs()) inputs.push_back({t, &in, 0});
  stream other_backend = make_stream(engine_of(second));
  EXPECT_THROW(cp.execute(other_backend, inputs, {{cp.outputs()[0], &out, 0}}), execute_error);
  stream other_context = make_stream(engine(&first, 0, 99, nullptr));
  EXPECT_THROW(cp.execute(other_context, inputs, {{cp.outputs()[0], &out, 0}}), execute_error);
  EXPECT_EQ(out, 0.f) << "nothing ran";
  EXPECT_EQ(run_mlp(cp, engine_of(first)), 1.f) << "its own engine's stream runs it";
}

TEST(Compile, ABackendOptionThatChangesTheCodeIsInTheKey) {
  toy_backend toy("toy_options", 1.f);
  const graph g = mlp_graph(8, 4, true);
  const std::vector<std::vector<std::int64_t>> shapes{{3, 8}, {8, 4}, {4}};
  const engine e = engine_of(toy);
  compile(g.partitions()[0], shapes, e);
  compile(g.partitions()[0], shapes, e);
  EXPECT_EQ(toy.compiles, 1) << "the same configuration is one compile";
  toy.option = "fast-math";
  compile(g.partitions()[0], shapes, e);
  EXPECT_EQ(toy.compiles, 2) << "a compiled partition of another configuration was served";
}

TEST(Compile, ABackendErrorReachesTheCallerAsCompileErrorWithTheBackendsErrorNested) {
  toy_backend toy("toy_compile_fails", 1.f);
  toy.compile_fails = true;
  const graph g = mlp_graph(8, 4, true);
  try {
    compile(g.partitions()[0], {{3, 8}, {8, 4}, {4}}, engine_of(toy));
    FAIL() << "compile succeeded";
  } catch (const compile_error& e) {
    EXPECT_NE(std::string(e.what()).find("driver refused"), std::string::npos) << e.what();
    try {
      std::rethrow_if_nested(e);
      FAIL() << "the backend's error is not nested";
    } catch (const toy_error& inner) {
      EXPECT_EQ(inner.status(), 7);
    }
  }
  toy.compile_fails = false;
  EXPECT_NO_THROW(compile(g.partitions()[0], {{3, 8}, {8, 4}, {4}}, engine_of(toy)))
      << "a failed compile is not cached";
}

TEST(Compile, ExecuteFailuresAreExecuteErrorsNotCompileErrors) {
  toy_backend toy("toy_execute_fails", 1.f);
  toy.execute_fails = true;
  const graph g = mlp_graph(8, 4, true);
  const engine e = engine_of(toy);
  const compiled_partition cp = compile(g.partitions()[0], {{3, 8}, {8, 4}, {4}}, e);
  try {
    run_mlp(cp, e);
    FAIL() << "execute succeeded";
  } catch (const compile_error& e) {
    FAIL() << "an execute failure was reported as compile_error: " << e.what();
  } catch (const execute_error& e) {
    EXPECT_NE(std::string(e.what()).find("refused the launch"), std::string::npos) << e.what();
    try {
      std::rethrow_if_nested(e);
      FAIL() << "the backend's error is not nested";
    } catch (const toy_error& inner) {
      EXPECT_EQ(inner.status(), 42);
    }
  }
  stream s = make_stream(e);
  EXPECT_THROW(cp.execute(s, {}, {}), execute_error) << "wrong tensor counts";
  EXPECT_THROW(compiled_partition().execute(s, {}, {}), execute_error);
}

TEST(Compile, EveryLibraryErrorIsAUnicacheError) {
  toy_backend toy("toy_base", 1.f);
  const graph g = mlp_graph(8, 4, true);
  const engine e = engine_of(toy);
  EXPECT_THROW(compile(g.partitions()[0], {{3, 9}, {8, 4}, {4}}, e), error);
  stream s = make_stream(e);
  EXPECT_THROW(compiled_partition().execute(s, {}, {}), error);
  graph unfinished;
  EXPECT_THROW(unfinished.partitions(), error);
  EXPECT_THROW(deserialize_blob({"p", "d", "v", "1"}, {}), error);
  EXPECT_THROW(kernel_cache().get_or_add({}, 1, "k", 1, 1, cache_future()), error);
}

TEST(Compile, BlobsOfShapeAgnosticKernelsAreOnePerConfiguration) {
  toy_backend toy("toy_blobs", 1.f);
  const graph g = mlp_graph(8, 4, true);
  const engine e = engine_of(toy);
  // The default configuration is every shape: ids differ per shape.
  EXPECT_NE(get_cache_blob_id(g.partitions()[0], {{3, 8}, {8, 4}, {4}}, e),
            get_cache_blob_id(g.partitions()[0], {{5, 8}, {8, 4}, {4}}, e));
  // A backend whose kernels take sizes as arguments says so: one id.
  EXPECT_EQ(shape_mode_configuration(kernel_shapes::agnostic, {{3, 8}, {8, 4}, {4}}),
            shape_mode_configuration(kernel_shapes::agnostic, {{5, 8}, {8, 4}, {4}}));
  EXPECT_NE(shape_mode_configuration(kernel_shapes::agnostic, {{3, 8}, {8, 4}, {4}}),
            shape_mode_configuration(kernel_shapes::agnostic, {{2, 3, 8}, {8, 4}, {4}}))
      << "ranks decide the kernels";
  EXPECT_NE(shape_mode_configuration(kernel_shapes::specialized, {{3, 8}, {8, 4}, {4}}),
            shape_mode_configuration(kernel_shapes::specialized, {{5, 8}, {8, 4}, {4}}));
  EXPECT_NE(shape_mode_configuration(kernel_shapes::agnostic, {{3, 8}}),
            shape_mode_configuration(kernel_shapes::specialized, {{3, 8}}));
}

}  // namespace
}  // namespace unicache
