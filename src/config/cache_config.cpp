// The caches' configuration: the environment variables' parsers, the
// process-wide settings (kernel shapes, constant check, specialization) and
// their setters.
#include <algorithm>
#include <atomic>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "unicache/config.hpp"
#include "unicache/error.hpp"
#include "util/env.hpp"
#include "util/mutex.hpp"
#include "util/log.hpp"
#include "util/parse.hpp"

namespace unicache {
namespace {

using detail::trim;

bool iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(a[i])) !=
        std::tolower(static_cast<unsigned char>(b[i]))) {
      return false;
    }
  }
  return true;
}

capacity_spec failure(std::string error, std::string_view token) {
  capacity_spec spec;
  spec.error = std::move(error);
  spec.bad_token = std::string(token);
  return spec;
}

}  // namespace

std::string_view to_string(engine_kind kind) { return kind == engine_kind::cpu ? "cpu" : "gpu"; }

std::string_view to_string(eviction_policy policy) {
  switch (policy) {
    case eviction_policy::no_evict: return "NO_EVICT";
    case eviction_policy::lru: return "LRU";
    case eviction_policy::cost: return "COST";
    case eviction_policy::library_default: return "DEFAULT";
  }
  return "?";
}

eviction_policy effective_policy(eviction_policy policy) {
  return policy == eviction_policy::library_default ? eviction_policy::cost : policy;
}

std::optional<eviction_policy> parse_policy(std::string_view text) {
  text = trim(text);
  for (auto p : {eviction_policy::no_evict, eviction_policy::lru, eviction_policy::cost,
                 eviction_policy::library_default}) {
    if (iequals(text, to_string(p))) return p;
  }
  return std::nullopt;
}

std::optional<bool> parse_switch(std::string_view text) {
  text = trim(text);
  if (text == "0") return false;
  if (text == "1") return true;
  return std::nullopt;
}

capacity_spec parse_capacity_spec(std::string_view text) {
  capacity_spec spec;
  if (trim(text).empty()) return failure("the value is empty", text);
  bool seen[engine_kind_count] = {false, false};
  std::size_t start = 0;
  for (;;) {
    const std::size_t end = text.find(';', start);
    const std::string_view part =
        text.substr(start, end == std::string_view::npos ? std::string_view::npos : end - start);
    if (trim(part).empty()) return failure("an empty part between ';'", part);

    // kind:size[:policy]
    const std::size_t c1 = part.find(':');
    if (c1 == std::string_view::npos) {
      return failure("expected kind:size[:policy]", trim(part));
    }
    const std::size_t c2 = part.find(':', c1 + 1);
    const std::string_view kind_text = trim(part.substr(0, c1));
    const std::string_view size_text = trim(part.substr(
        c1 + 1, c2 == std::string_view::npos ? std::string_view::npos : c2 - c1 - 1));
    std::optional<eviction_policy> policy;
    if (c2 != std::string_view::npos) {
      const std::string_view policy_text = trim(part.substr(c2 + 1));
      if (policy_text.find(':') != std::string_view::npos) {
        return failure("too many ':' in a part", trim(part));
      }
      policy = parse_policy(policy_text);
      if (!policy) {
        return failure("unknown policy (expected NO_EVICT, LRU, COST or DEFAULT)", policy_text);
      }
    }

    engine_kind kind;
    if (iequals(kind_text, "cpu")) {
      kind = engine_kind::cpu;
    } else if (iequals(kind_text, "gpu")) {
      kind = engine_kind::gpu;
    } else {
      return failure("unknown engine kind (expected cpu or gpu)", kind_text);
    }
    if (seen[static_cast<int>(kind)]) return failure("engine kind given twice", kind_text);
    seen[static_cast<int>(kind)] = true;

    if (size_text.empty()) return failure("missing size in MB", trim(part));
    if (size_text.find_first_not_of("0123456789") != std::string_view::npos) {
      return failure("size must be a non-negative decimal number of MB", size_text);
    }
    const std::optional<std::uint64_t> mb = detail::parse_decimal(size_text, max_capacity_mb);
    if (!mb) return failure("size in MB overflows", size_text);
    spec.settings.push_back({kind, static_cast<std::size_t>(*mb), policy});

    if (end == std::string_view::npos) break;
    start = end + 1;
  }
  return spec;
}

namespace {

void apply_capacity_variable(const char* name, cache_config& config) {
  const std::optional<std::string> value = detail::environment_variable(name);
  if (!value) return;
  const capacity_spec spec = parse_capacity_spec(*value);
  if (!spec.ok()) {
    detail::warn_ignored_setting(name, *value, spec.bad_token, spec.error,
                                 "cpu:" + std::to_string(config.cpu.capacity_mb) +
                                     ";gpu:" + std::to_string(config.gpu.capacity_mb));
    return;
  }
  for (const capacity_setting& s : spec.settings) {
    config.of(s.kind).capacity_mb = s.capacity_mb;
    if (s.policy) config.of(s.kind).policy = *s.policy;
  }
}


}  // namespace

cache_config cache_config::constant_tensor_cache_from_environment() {
  cache_config config;
  config.name = "constant_tensor_cache";
  apply_capacity_variable("ONEDNN_GRAPH_CONSTANT_TENSOR_CACHE_CAPACITY", config);
  detail::apply_switch_variable("ONEDNN_GRAPH_CONSTANT_TENSOR_CACHE", config.enabled);
  detail::apply_switch_variable("UNICACHE_VERBOSE", config.verbose);
  return config;
}

cache_config cache_config::kernel_cache_from_environment() {
  cache_config config;
  config.name = "kernel_cache";
  config.cpu.capacity_mb = 256;
  config.gpu.capacity_mb = 256;
  apply_capacity_variable("UNICACHE_KERNEL_CACHE_CAPACITY", config);
  detail::apply_switch_variable("UNICACHE_KERNEL_CACHE", config.enabled);
  detail::apply_switch_variable("UNICACHE_VERBOSE", config.verbose);
  return config;
}

std::string_view to_string(kernel_shapes mode) {
  switch (mode) {
    case kernel_shapes::agnostic: return "agnostic";
    case kernel_shapes::specialized: return "specialized";
    case kernel_shapes::adaptive: return "adaptive";
  }
  return "?";
}

std::optional<kernel_shapes> parse_kernel_shapes(std::string_view text) {
  text = trim(text);
  for (auto m : {kernel_shapes::adaptive, kernel_shapes::agnostic, kernel_shapes::specialized}) {
    if (iequals(text, to_string(m))) return m;
  }
  return std::nullopt;
}

std::string_view to_string(constant_check mode) {
  switch (mode) {
    case constant_check::sampled: return "sampled";
    case constant_check::full: return "full";
    case constant_check::none: return "none";
  }
  return "?";
}

std::optional<constant_check> parse_constant_check(std::string_view text) {
  text = trim(text);
  for (auto m : {constant_check::sampled, constant_check::full, constant_check::none}) {
    if (iequals(text, to_string(m))) return m;
  }
  return std::nullopt;
}

namespace {

// A process-wide mode: the environment variable `name` on first use (a
// malformed value gets one warning and `fallback`), then whatever the API sets.
template <typename Mode>
std::atomic<Mode> mode_from_environment(const char* name, Mode fallback,
                                        std::optional<Mode> (*parse)(std::string_view), const char* expected) {
  const std::optional<std::string> value = detail::environment_variable(name);
  if (!value) return fallback;
  if (const auto parsed = parse(*value)) return *parsed;
  detail::warn_ignored_setting(name, *value, *value, expected, to_string(fallback));
  return fallback;
}

std::atomic<kernel_shapes>& kernel_shapes_setting() {
  static std::atomic<kernel_shapes> setting = mode_from_environment(
      "UNICACHE_KERNEL_SHAPES", kernel_shapes::adaptive, &parse_kernel_shapes,
      "expected adaptive, agnostic or specialized");
  return setting;
}

std::atomic<constant_check>& constant_check_setting() {
  static std::atomic<constant_check> setting = mode_from_environment(
      "UNICACHE_CONSTANT_CHECK", constant_check::sampled, &parse_constant_check, "expected sampled, full or none");
  return setting;
}

// A count from the environment variable `name`: its value if it is a decimal
// number up to `max`, else (one warning) `fallback`.
unsigned count_from_environment(const char* name, unsigned fallback, unsigned max) {
  const std::optional<std::string> value = detail::environment_variable(name);
  if (!value) return fallback;
  if (const auto parsed = detail::parse_decimal(detail::trim(*value), max)) return static_cast<unsigned>(*parsed);
  detail::warn_ignored_setting(name, *value, *value, "expected a number from 0 to " + std::to_string(max),
                               std::to_string(fallback));
  return fallback;
}

// A non-negative decimal factor (digits with at most one point, up to 1e6)
// from the environment variable `name`, else (one warning) `fallback`.
double threshold_from_environment(const char* name, double fallback) {
  const std::optional<std::string> value = detail::environment_variable(name);
  if (!value) return fallback;
  const std::string_view text = detail::trim(*value);
  const std::size_t point = text.find('.');
  const std::string_view whole = text.substr(0, point);
  const std::string_view fraction = point == std::string_view::npos ? std::string_view() : text.substr(point + 1);
  const auto digits = [](std::string_view t) {
    return t.size() <= 7 && std::all_of(t.begin(), t.end(), [](char c) { return c >= '0' && c <= '9'; });
  };
  if (!text.empty() && text != "." && digits(whole) && digits(fraction) &&
      (point == std::string_view::npos || fraction.find('.') == std::string_view::npos)) {
    const double parsed = std::strtod(std::string(text).c_str(), nullptr);
    if (parsed <= 1e6) return parsed;
  }
  detail::warn_ignored_setting(name, *value, *value, "expected a number from 0 to 1000000 (e.g. 0.5)",
                               std::to_string(fallback));
  return fallback;
}

constexpr unsigned kMaxSpecializeThreads = 64;
constexpr unsigned kMaxSpecializeVariants = 1024;

// The settings as immutable snapshots behind an atomic pointer: read with
// no lock on every generic execution of a cold class. A set publishes a new
// snapshot; the old ones stay (reachable, a few bytes each) because a reader
// may still hold one.
struct specialize_setting {
  std::atomic<const specialize_settings*> current{nullptr};
  detail::mutex mu;
  std::vector<std::unique_ptr<const specialize_settings>> all ABSL_GUARDED_BY(mu);
};
specialize_setting& specialize_setting_instance() {
  static specialize_setting* const setting = [] {
    auto* s = new specialize_setting();
    auto initial = std::make_unique<specialize_settings>();
    initial->threads = count_from_environment("UNICACHE_SPECIALIZE_THREADS", 1, kMaxSpecializeThreads);
    initial->max_variants = count_from_environment("UNICACHE_SPECIALIZE_MAX", 32, kMaxSpecializeVariants);
    initial->threshold = threshold_from_environment("UNICACHE_SPECIALIZE_THRESHOLD", initial->threshold);
    s->current.store(initial.get(), std::memory_order_release);
    detail::scoped_lock lock(&s->mu);
    s->all.push_back(std::move(initial));
    return s;
  }();
  return *setting;
}

}  // namespace

specialize_settings current_specialize_settings() {
  return *specialize_setting_instance().current.load(std::memory_order_acquire);
}

void set_specialize_settings(const specialize_settings& settings) {
  if (settings.threads > kMaxSpecializeThreads) {
    throw invalid_argument("specialize_settings: threads " + std::to_string(settings.threads) + " (at most " +
                                std::to_string(kMaxSpecializeThreads) + ")");
  }
  if (settings.max_variants > kMaxSpecializeVariants) {
    throw invalid_argument("specialize_settings: max_variants " + std::to_string(settings.max_variants) +
                                " (at most " + std::to_string(kMaxSpecializeVariants) + ")");
  }
  if (!std::isfinite(settings.threshold) || settings.threshold < 0 || settings.threshold > 1e6) {
    throw invalid_argument("specialize_settings: threshold must be in [0, 1e6]");
  }
  if (!std::isfinite(settings.expected_saving) || settings.expected_saving < 0 || settings.expected_saving > 1) {
    throw invalid_argument("specialize_settings: expected_saving must be in [0, 1]");
  }
  specialize_setting& s = specialize_setting_instance();
  auto snapshot = std::make_unique<const specialize_settings>(settings);
  detail::scoped_lock lock(&s.mu);
  s.current.store(snapshot.get(), std::memory_order_release);
  s.all.push_back(std::move(snapshot));
}

kernel_shapes current_kernel_shapes() { return kernel_shapes_setting().load(std::memory_order_relaxed); }
void set_kernel_shapes(kernel_shapes mode) {
  if (to_string(mode) == "?") throw invalid_argument("set_kernel_shapes: unknown mode " + std::to_string(static_cast<int>(mode)));
  kernel_shapes_setting().store(mode, std::memory_order_relaxed);
}
constant_check current_constant_check() { return constant_check_setting().load(std::memory_order_relaxed); }
void set_constant_check(constant_check mode) {
  if (to_string(mode) == "?") throw invalid_argument("set_constant_check: unknown mode " + std::to_string(static_cast<int>(mode)));
  constant_check_setting().store(mode, std::memory_order_relaxed);
}

}  // namespace unicache
