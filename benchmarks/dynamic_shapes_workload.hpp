// The workload of bench_dynamic_shapes and bench_adaptive_interleaved: a
// serving trace of a BERT-base encoder layer's matmuls (see
// bench_dynamic_shapes.cpp for what it models), the layer as a graph, and
// the CPU device that runs it with unicache's compiled partitions.
#pragma once

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "unicache/compiler.hpp"
#include "unicache/graph.hpp"
#include "unicache/onednn_cpu.hpp"

namespace unicache::bench {

// --- The trace -------------------------------------------------------------------

struct request {
  int batch;
  int length;  // padded: the longest sequence of the batch
  std::int64_t rows() const { return static_cast<std::int64_t>(batch) * length; }
};

inline std::vector<request> make_trace(int requests, unsigned seed, int max_batch, int max_seq) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int> batch(1, max_batch);
  std::lognormal_distribution<double> length(std::log(48.0), 0.9);
  std::vector<request> trace;
  for (int i = 0; i < requests; ++i) {
    request r{batch(rng), 1};
    for (int s = 0; s < r.batch; ++s) {
      const int l = std::clamp(static_cast<int>(std::lround(length(rng))), 1, max_seq);
      r.length = std::max(r.length, l);
    }
    trace.push_back(r);
  }
  return trace;
}

inline std::int64_t largest_rows(const std::vector<request>& trace) {
  std::int64_t rows = 1;
  for (const request& r : trace) rows = std::max(rows, r.rows());
  return rows;
}

// --- The layer ---------------------------------------------------------------------

// The six fused MatMul(+bias)(+GELU) partitions; Q, K, V and the output
// projection have one structure, so one compiled partition per shape serves
// all four.
struct layer {
  graph g;
  struct step {
    std::int64_t k, n;
    int input;   // which activation feeds it: -1 = x, else a step's output
    bool gelu;
  };
  std::vector<step> steps;

  layer(std::int64_t h, std::int64_t f) {
    steps = {{h, h, -1, false}, {h, h, -1, false}, {h, h, -1, false},
             {h, h, 2, false},  {h, f, 3, true},   {f, h, 4, false}};
    std::vector<logical_tensor> outs;
    const logical_tensor x = g.tensor({-1, h});
    for (const step& s : steps) {
      const logical_tensor in = s.input < 0 ? x : outs[static_cast<std::size_t>(s.input)];
      const logical_tensor w = g.tensor({s.k, s.n}, tensor_property::constant);
      const logical_tensor b = g.tensor({s.n}, tensor_property::constant);
      const logical_tensor mm = g.tensor({-1, s.n}), sum = g.tensor({-1, s.n});
      g.add_op(op_kind::matmul, {in, w}, {mm});
      g.add_op(op_kind::add, {mm, b}, {sum});
      if (s.gelu) {
        const logical_tensor y = g.tensor({-1, s.n});
        g.add_op(op_kind::gelu_erf, {sum}, {y});
        outs.push_back(y);
      } else {
        outs.push_back(sum);
      }
    }
    g.finalize();
  }
  const partition& part(std::size_t i) const { return g.partitions()[i]; }
  std::vector<std::vector<std::int64_t>> shapes(std::size_t i, std::int64_t m) const {
    return {{m, steps[i].k}, {steps[i].k, steps[i].n}, {steps[i].n}};
  }
};

inline std::vector<float> random_values(std::size_t count, unsigned seed, float scale) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-scale, scale);
  std::vector<float> v(count);
  for (auto& x : v) x = dist(rng);
  return v;
}

// What a backend did, from its own counters.
struct work {
  double compiles = 0;  // kernels built (programs from source, primitives created)
  double loads = 0;     // kernels loaded from stored binaries
  double packs = 0;     // constant weights packed
  double compile_ms = 0, load_ms = 0, pack_ms = 0;
  double first_launch_ms = 0;  // GPU: drivers finish compiling (or loading) at a kernel's first launch
  double total_ms() const { return compile_ms + load_ms + pack_ms + first_launch_ms; }
  work operator-(const work& o) const {
    return {compiles - o.compiles,      loads - o.loads,     packs - o.packs, compile_ms - o.compile_ms,
            load_ms - o.load_ms,        pack_ms - o.pack_ms, first_launch_ms - o.first_launch_ms};
  }
};

// --- Devices ---------------------------------------------------------------------

// The buffers and execution of one backend: activations sized for the
// largest request, weights made once.
class device {
 public:
  virtual ~device() = default;
  virtual const engine& eng() const = 0;
  virtual stream& strm() = 0;
  virtual work counters() const = 0;
  virtual std::string name() const = 0;
  // Runs step `i` of the layer for `m` rows with compiled partition `cp`.
  virtual void run(const compiled_partition& cp, std::size_t i) = 0;
};

class cpu_device final : public device {
 public:
  cpu_device(const layer& l, std::int64_t max_rows) : l_(l) {
    eng_ = onednn_cpu::make_engine();
    strm_ = make_stream(eng_);
    x_ = random_values(static_cast<std::size_t>(max_rows * l.steps[0].k), 1, 1.f);
    for (std::size_t i = 0; i < l.steps.size(); ++i) {
      const auto& s = l.steps[i];
      w_.push_back(random_values(static_cast<std::size_t>(s.k * s.n), 10 + i, 0.05f));
      b_.push_back(random_values(static_cast<std::size_t>(s.n), 20 + i, 0.05f));
      y_.emplace_back(static_cast<std::size_t>(max_rows * s.n));
    }
  }
  const engine& eng() const override { return eng_; }
  stream& strm() override { return strm_; }
  std::string name() const override { return "oneDNN CPU (" + std::to_string(::sysconf(_SC_NPROCESSORS_ONLN)) + " cores)"; }
  work counters() const override {
    const onednn_cpu::backend_stats s = onednn_cpu::stats();
    return {double(s.primitives_created), 0, double(s.weights_packed), s.create_ns / 1e6, 0, s.pack_ns / 1e6, 0};
  }
  void run(const compiled_partition& cp, std::size_t i) override {
    const auto& s = l_.steps[i];
    float* in = s.input < 0 ? x_.data() : y_[static_cast<std::size_t>(s.input)].data();
    cp.execute(strm_, {{cp.inputs()[0], in, 0}, {cp.inputs()[1], w_[i].data(), 0}, {cp.inputs()[2], b_[i].data(), 0}},
               {{cp.outputs()[0], y_[i].data(), 0}});
  }

 private:
  const layer& l_;
  engine eng_;
  stream strm_;
  std::vector<float> x_;
  std::vector<std::vector<float>> w_, b_, y_;
};

}  // namespace unicache::bench
