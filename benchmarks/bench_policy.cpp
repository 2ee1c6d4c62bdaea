// bench_policy: how much rebuild time each eviction policy loses when the
// cache is smaller than what a workload touches.
//
// Request traces are replayed through the library's own unified_cache (its
// real policy code, one get_or_add per request) with the capacity set to 1%
// to 80% of the trace's footprint (the bytes of all distinct objects), and
// through reference policies written in policies.hpp (GDSF, SIEVE) and two
// offline bounds (Belady's MIN where sizes are equal; a PFOO-L style
// cost-weighted lower bound everywhere). The metric is the cost-weighted
// miss ratio: the build time of the missed requests over the build time of
// all requests (first requests included, so no policy reaches 0).
//
// Traces:
//   synthetic  Zipf popularity (alpha 0.6, 0.8, 1.0, 1.2) over --objects objects
//              in random order; sizes log-normal from 1 KB to 1 GB (median
//              32 KB); costs log-uniform from 1 ms to 1 s, either independent
//              of the size or growing with it (log cost follows log size,
//              plus noise); one trace with equal sizes, where Belady applies.
//   recorded   CSV files of key,size_bytes,cost_ns (bench_dynamic_shapes
//              --record-trace writes them), given with --trace.
//
// Usage:
//   bench_policy [--requests N] [--objects N] [--seed S] [--trace FILE]...
//                [--cache-pcts 1,2,5,10,20,40,80] [--json FILE] [--quick]
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <future>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <unordered_map>
#include <vector>

#include "policies.hpp"
#include "unicache/cache.hpp"
#include "unicache/version.hpp"

namespace {

using namespace unicache;
using namespace unicache::bench;

struct trace {
  std::string name;
  std::string source;  // "synthetic" or the CSV path
  double alpha = 0;
  std::string cost_model;
  bool equal_sizes = false;
  std::size_t objects = 0;
  std::vector<object_request> requests;

  std::uint64_t footprint() const {
    std::vector<bool> seen(objects, false);
    std::uint64_t bytes = 0;
    for (const auto& r : requests) {
      if (!seen[r.id]) {
        seen[r.id] = true;
        bytes += r.size;
      }
    }
    return bytes;
  }
  double total_cost() const {
    double c = 0;
    for (const auto& r : requests) c += r.cost;
    return c;
  }
};

trace synthetic(double alpha, const std::string& cost_model, bool equal_sizes, std::size_t objects,
                std::size_t requests, unsigned seed) {
  std::mt19937_64 rng(seed);
  trace t;
  t.alpha = alpha;
  t.cost_model = cost_model;
  t.equal_sizes = equal_sizes;
  t.objects = objects;
  t.source = "synthetic";
  char name[96];
  std::snprintf(name, sizeof name, "zipf%.1f-%s%s", alpha, cost_model.c_str(), equal_sizes ? "-equal" : "");
  t.name = name;
  std::normal_distribution<double> log_size(std::log10(32.0 * 1024), 1.0), noise(0.0, 0.3);
  std::uniform_real_distribution<double> uniform(0.0, 1.0);
  std::vector<std::uint64_t> size(objects);
  std::vector<double> cost(objects);
  for (std::size_t i = 0; i < objects; ++i) {
    const double ls = equal_sizes ? std::log10(1024.0 * 1024) : std::clamp(log_size(rng), 3.0, 9.0);
    size[i] = static_cast<std::uint64_t>(std::pow(10.0, ls));
    double lc;  // log10 of the cost in ns: 6 (1 ms) .. 9 (1 s)
    if (cost_model == "correlated") {
      lc = std::clamp(6.0 + 3.0 * (ls - 3.0) / 6.0 + noise(rng), 6.0, 9.0);
    } else {
      lc = 6.0 + 3.0 * uniform(rng);
    }
    cost[i] = std::pow(10.0, lc);
  }
  // Zipf ranks in a random order of objects (popularity independent of size).
  std::vector<double> cdf(objects);
  double sum = 0;
  for (std::size_t r = 0; r < objects; ++r) cdf[r] = sum += 1.0 / std::pow(static_cast<double>(r + 1), alpha);
  std::vector<std::uint32_t> order(objects);
  for (std::size_t i = 0; i < objects; ++i) order[i] = static_cast<std::uint32_t>(i);
  std::shuffle(order.begin(), order.end(), rng);
  for (std::size_t i = 0; i < requests; ++i) {
    const double u = uniform(rng) * sum;
    const std::size_t rank = static_cast<std::size_t>(std::lower_bound(cdf.begin(), cdf.end(), u) - cdf.begin());
    const std::uint32_t id = order[std::min(rank, objects - 1)];
    t.requests.push_back({id, size[id], cost[id]});
  }
  return t;
}

trace recorded(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot read trace " + path);
  trace t;
  t.source = path;
  t.name = "recorded:" + path.substr(path.find_last_of('/') + 1);
  t.cost_model = "measured";
  std::unordered_map<std::string, std::uint32_t> ids;
  std::string line;
  std::size_t line_no = 0;
  while (std::getline(in, line)) {
    ++line_no;
    if (line_no == 1 && line.rfind("key,", 0) == 0) continue;
    std::stringstream fields(line);
    std::string key, size, cost;
    if (!std::getline(fields, key, ',') || !std::getline(fields, size, ',') || !std::getline(fields, cost)) {
      throw std::runtime_error(path + ":" + std::to_string(line_no) + ": expected key,size_bytes,cost_ns");
    }
    const auto [it, added] = ids.emplace(key, static_cast<std::uint32_t>(ids.size()));
    t.requests.push_back({it->second, std::max<std::uint64_t>(1, std::stoull(size)), std::stod(cost)});
  }
  t.objects = ids.size();
  if (t.requests.empty()) throw std::runtime_error("trace " + path + " is empty");
  return t;
}

// --- Replays -------------------------------------------------------------------------

constexpr std::uint64_t kMb = 1 << 20;

// Sizes are scaled by `scale` so that the capacity is a whole number of MB
// (the cache's unit) with negligible rounding; every policy sees the same
// scaled sizes.
double unicache_missed_cost(const trace& t, eviction_policy policy, std::uint64_t capacity_mb, double scale) {
  cache_config config;
  config.cpu = {capacity_mb, policy};
  unified_cache cache(config);
  const cache_scope scope{engine_kind::cpu, 0, 0};
  const cache_value value = std::make_shared<int>(0);
  double missed = 0;
  for (const auto& r : t.requests) {
    const char* key = reinterpret_cast<const char*>(&r.id);
    std::promise<cache_value> promise;
    const auto size = static_cast<std::size_t>(std::max(1.0, std::round(r.size * scale)));
    if (!cache.get_or_add(scope, 1, std::string_view(key, sizeof r.id), size, static_cast<std::uint64_t>(r.cost),
                          promise.get_future().share())
             .valid()) {
      missed += r.cost;
      promise.set_value(value);
    }
  }
  return missed;
}

template <typename Cache>
double reference_missed_cost(const trace& t, std::uint64_t capacity) {
  Cache cache(t.objects, capacity);
  double missed = 0;
  for (const auto& r : t.requests) {
    if (!cache.access(r)) missed += r.cost;
  }
  return missed;
}

std::vector<object_request> scaled(const trace& t, double scale) {
  std::vector<object_request> out = t.requests;
  for (auto& r : out) r.size = static_cast<std::uint64_t>(std::max(1.0, std::round(r.size * scale)));
  return out;
}

struct point {
  std::string policy;
  double cache_pct;
  double cost_miss_ratio;
};

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::stringstream in(s);
  std::string part;
  while (std::getline(in, part, sep)) {
    if (!part.empty()) out.push_back(part);
  }
  return out;
}

std::string json_string(const std::string& v) {
  std::string out = "\"";
  for (char c : v) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

const char* const kUsage =
    "usage: bench_policy [--requests N] [--objects N] [--seed S] [--trace FILE]...\n"
    "                    [--cache-pcts 1,2,5,10,20,40,80] [--json FILE] [--quick]\n"
    "\n"
    "How much rebuild time each eviction policy loses when the cache is smaller\n"
    "than what a workload touches: request traces replayed through the\n"
    "library's unified_cache (NO_EVICT, LRU, COST, DEFAULT), reference GDSF and\n"
    "SIEVE, and offline bounds (Belady where sizes are equal, a cost-weighted\n"
    "lower bound), with the capacity at each percentage of the trace's\n"
    "footprint. Prints the cost-weighted miss ratio per policy and capacity.\n"
    "\n"
    "  --requests N     requests per synthetic trace (default 200000)\n"
    "  --objects N      distinct objects per synthetic trace (default 20000)\n"
    "  --seed S         the synthetic traces' seed (default 2026)\n"
    "  --trace FILE     also replay a recorded key,size_bytes,cost_ns CSV (from\n"
    "                   bench_dynamic_shapes --record-trace); may be repeated\n"
    "  --cache-pcts L   capacities, in percent of the footprint, in (0, 100]\n"
    "  --json FILE      where the figures go (default bench_policy.json)\n"
    "  --quick          two synthetic traces instead of nine\n";

}  // namespace

int main(int argc, char** argv) {
  std::size_t requests = 200000, objects = 20000;
  unsigned seed = 2026;
  std::vector<std::string> trace_files;
  std::vector<double> pcts{1, 2, 5, 10, 20, 40, 80};
  std::string json_path = "bench_policy.json";
  bool quick = false;
  try {
    for (int i = 1; i < argc; ++i) {
      const std::string a = argv[i];
      auto next = [&]() -> std::string {
        if (i + 1 >= argc) throw std::invalid_argument(a + " needs a value");
        return argv[++i];
      };
      if (a == "--requests") {
        requests = std::stoul(next());
      } else if (a == "--objects") {
        objects = std::stoul(next());
      } else if (a == "--seed") {
        seed = static_cast<unsigned>(std::stoul(next()));
      } else if (a == "--trace") {
        trace_files.push_back(next());
      } else if (a == "--cache-pcts") {
        pcts.clear();
        for (const auto& p : split(next(), ',')) pcts.push_back(std::stod(p));
      } else if (a == "--json") {
        json_path = next();
      } else if (a == "--quick") {
        quick = true;
      } else if (a == "--help" || a == "-h") {
        std::fputs(kUsage, stdout);
        return 0;
      } else {
        throw std::invalid_argument("unknown argument " + a);
      }
    }
    if (requests < 1 || objects < 2 || pcts.empty()) throw std::invalid_argument("counts must be positive");
    for (double p : pcts) {
      if (!(p > 0 && p <= 100)) throw std::invalid_argument("cache percentages must be in (0, 100]");
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_policy: %s\n%s", e.what(), kUsage);
    return 2;
  }

  std::vector<trace> traces;
  try {
    if (quick) {
      traces.push_back(synthetic(0.8, "independent", false, objects, requests, seed));
      traces.push_back(synthetic(0.8, "independent", true, objects, requests, seed + 1));
    } else {
      unsigned s = seed;
      for (double alpha : {0.6, 0.8, 1.0, 1.2}) {
        for (const char* model : {"independent", "correlated"}) {
          traces.push_back(synthetic(alpha, model, false, objects, requests, s++));
        }
      }
      traces.push_back(synthetic(0.8, "independent", true, objects, requests, s++));
    }
    for (const auto& f : trace_files) traces.push_back(recorded(f));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_policy: %s\n", e.what());
    return 1;
  }

  const std::vector<std::pair<std::string, eviction_policy>> library{
      {"NO_EVICT", eviction_policy::no_evict},
      {"LRU", eviction_policy::lru},
      {"COST", eviction_policy::cost},
      {"DEFAULT", eviction_policy::library_default}};

  std::ofstream json(json_path);
  json << "{\n  \"benchmark\": \"bench_policy\",\n  \"version\": " << json_string(UNICACHE_VERSION_STRING)
       << ",\n  \"metric\": \"cost-weighted miss ratio: build time of missed requests / of all requests\""
       << ",\n  \"traces\": [\n";
  for (std::size_t ti = 0; ti < traces.size(); ++ti) {
    const trace& t = traces[ti];
    const std::uint64_t footprint = t.footprint();
    const double total = t.total_cost();
    std::printf("\n%s: %zu requests, %zu objects, footprint %.1f MB\n", t.name.c_str(), t.requests.size(), t.objects,
                footprint / double(kMb));
    std::printf("%7s", "cache%");
    std::vector<std::string> columns;
    for (const auto& [name, p] : library) columns.push_back(name);
    columns.insert(columns.end(), {"GDSF", "SIEVE"});
    if (t.equal_sizes) columns.push_back("BELADY");
    columns.push_back("BOUND");
    for (const auto& c : columns) std::printf(" %9s", c.c_str());
    std::printf("\n");

    std::vector<point> points;
    for (double pct : pcts) {
      // Scale sizes so that this capacity is at least 4096 whole MB.
      const double capacity_bytes = footprint * pct / 100.0;
      const double scale = std::max(1.0, 4096.0 * kMb / capacity_bytes);
      const auto capacity_mb = static_cast<std::uint64_t>(capacity_bytes * scale / kMb);
      const std::uint64_t capacity = capacity_mb * kMb;
      const trace scaled_trace{t.name, t.source, t.alpha, t.cost_model, t.equal_sizes, t.objects, scaled(t, scale)};
      std::printf("%7.0f", pct);
      auto add = [&](const std::string& policy, double missed) {
        points.push_back({policy, pct, missed / total});
        std::printf(" %9.4f", missed / total);
        std::fflush(stdout);
      };
      for (const auto& [name, policy] : library) add(name, unicache_missed_cost(t, policy, capacity_mb, scale));
      add("GDSF", reference_missed_cost<gdsf_cache>(scaled_trace, capacity));
      add("SIEVE", reference_missed_cost<sieve_cache>(scaled_trace, capacity));
      if (t.equal_sizes) {
        add("BELADY", belady_missed_cost(scaled_trace.requests, t.objects,
                                         static_cast<std::size_t>(capacity / scaled_trace.requests[0].size)));
      }
      add("BOUND", cost_bound_missed_cost(scaled_trace.requests, t.objects, capacity));
      std::printf("\n");
    }
    json << "    {\"name\": " << json_string(t.name) << ", \"source\": " << json_string(t.source)
         << ", \"alpha\": " << t.alpha << ", \"cost_model\": " << json_string(t.cost_model)
         << ", \"equal_sizes\": " << (t.equal_sizes ? "true" : "false") << ", \"requests\": " << t.requests.size()
         << ", \"objects\": " << t.objects << ", \"footprint_bytes\": " << footprint << ", \"points\": [";
    for (std::size_t i = 0; i < points.size(); ++i) {
      json << (i ? ", " : "") << "{\"policy\": " << json_string(points[i].policy)
           << ", \"cache_pct\": " << points[i].cache_pct << ", \"cost_miss_ratio\": " << points[i].cost_miss_ratio
           << "}";
    }
    json << "]}" << (ti + 1 < traces.size() ? "," : "") << "\n";
  }
  json << "  ]\n}\n";
  json.close();
  if (!json) {
    std::fprintf(stderr, "bench_policy: cannot write %s\n", json_path.c_str());
    return 1;
  }
  std::printf("\nwrote %s\n", json_path.c_str());
  return 0;
}
