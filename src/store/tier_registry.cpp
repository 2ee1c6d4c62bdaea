// The scheme registry (store/tier_registry.hpp, unicache/storage_tier.hpp),
// and remote_maintenance over it.
#include "store/tier_registry.hpp"

#include <algorithm>
#include <map>
#include <mutex>

#include "util/env.hpp"
#include "util/log.hpp"

namespace unicache::detail {
namespace {

struct scheme_factories {
  tier_factory make = nullptr;
  maintenance_factory maintain = nullptr;
  bool operator==(const scheme_factories&) const = default;
};

struct registry {
  std::mutex mu;
  std::map<std::string, scheme_factories> schemes;
};

bool valid_scheme(const std::string& s) {
  if (s.empty() || s.size() > 32 || s[0] < 'a' || s[0] > 'z') return false;
  for (const char c : s) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '+' || c == '.' || c == '-';
    if (!ok) return false;
  }
  return true;
}

registry& raw_registry() {
  static registry* const r = new registry();  // never destroyed: usable from static destructors
  return *r;
}

// The factories of `url`'s scheme. Throws invalid_argument for a URL of
// no registered scheme, naming the registered ones.
scheme_factories factories_of(std::string_view url) {
  const std::size_t colon = url.find("://");
  const std::string scheme(url.substr(0, colon == std::string_view::npos ? 0 : colon));
  {
    registry& r = raw_registry();
    std::lock_guard lock(r.mu);
    if (const auto it = r.schemes.find(scheme); it != r.schemes.end()) return it->second;
  }
  std::string known;
  for (const std::string& s : tier_schemes()) known += (known.empty() ? "" : ", ") + s + "://";
  if (known.empty()) {
    throw invalid_argument("no remote tier scheme is registered in this program: the remote component "
                           "registers redis:// (link unicache::remote and call unicache::register_redis_tiers())");
  }
  throw invalid_argument("a remote tier URL starts with one of " + known +
                         (valid_scheme(scheme) ? ", not " + scheme + "://" : ""));
}

}  // namespace
}  // namespace unicache::detail

namespace unicache {

void register_tier_scheme(const std::string& scheme, tier_factory make, maintenance_factory maintain) {
  if (!detail::valid_scheme(scheme)) {
    throw invalid_argument("a tier scheme of [a-z][a-z0-9+.-]*, up to 32 characters, got " +
                           detail::quoted(scheme, 40));
  }
  if (!make) throw invalid_argument("tier scheme " + scheme + ": no factory");
  detail::registry& r = detail::raw_registry();
  std::lock_guard lock(r.mu);
  const detail::scheme_factories factories{make, maintain};
  const auto [it, inserted] = r.schemes.emplace(scheme, factories);
  if (!inserted && it->second != factories) throw invalid_argument("tier scheme " + scheme + " is registered already");
}

std::vector<std::string> tier_schemes() {
  detail::registry& r = detail::raw_registry();
  std::lock_guard lock(r.mu);
  std::vector<std::string> out;
  for (const auto& [scheme, factories] : r.schemes) out.push_back(scheme);
  return out;
}

remote_maintenance::remote_maintenance(const std::string& url, const std::string& secret_file)
    : impl_(detail::make_tier_maintenance(url, secret_file)) {}
remote_maintenance::~remote_maintenance() = default;
remote_summary remote_maintenance::stats() { return impl_->stats(); }
std::vector<remote_entry_info> remote_maintenance::list() { return impl_->list(); }
std::vector<remote_entry_info> remote_maintenance::verify(bool fix) { return impl_->verify(fix); }
std::uint64_t remote_maintenance::clear() { return impl_->clear(); }

}  // namespace unicache

namespace unicache::detail {

std::shared_ptr<storage_tier> make_tier(std::string_view url, const std::string& secret_file) {
  return factories_of(url).make(url, secret_file);
}

std::unique_ptr<tier_maintenance> make_tier_maintenance(std::string_view url, const std::string& secret_file) {
  const scheme_factories factories = factories_of(url);
  if (!factories.maintain) {
    throw invalid_argument("the " + std::string(url.substr(0, url.find("://"))) +
                           ":// tier offers no maintenance (stats, list, verify, clear)");
  }
  return factories.maintain(url, secret_file);
}

tier_list make_tiers(std::string_view urls, const std::string& secret_file) {
  tier_list out;
  constexpr std::string_view kSpace = " \t\n";
  for (std::size_t at = urls.find_first_not_of(kSpace); at != std::string_view::npos;
       at = urls.find_first_not_of(kSpace, at)) {
    const std::size_t end = std::min(urls.find_first_of(kSpace, at), urls.size());
    if (out.size() == kMaxRemoteTiers) {
      throw invalid_argument("more than " + std::to_string(kMaxRemoteTiers) + " remote tier URLs");
    }
    out.push_back(make_tier(urls.substr(at, end - at), secret_file));
    at = end;
  }
  return out;
}

tier_list tiers_from_environment() noexcept {
  try {
    const std::optional<std::string> urls = environment_variable("UNICACHE_REMOTE_CACHE");
    if (!urls || urls->empty()) return {};
    const std::string secret_file = environment_variable("UNICACHE_REMOTE_CACHE_SECRET_FILE").value_or("");
    try {
      return make_tiers(*urls, secret_file);
    } catch (const error& e) {
      // A malformed URL or secret file, or a tier that cannot start its
      // thread. The value is not echoed: it may hold a password.
      warn(std::string("ignoring UNICACHE_REMOTE_CACHE (not shown: it may hold a password): ") + e.what() +
           "; running with the local store only");
    }
  } catch (...) {
  }
  return {};
}

}  // namespace unicache::detail
