// parse_redis_url and redis_config::to_string (unicache/remote.hpp).
#include <cctype>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "remote/redis_client.hpp"
#include "unicache/remote.hpp"
#include "util/parse.hpp"

namespace unicache {
namespace {

constexpr std::size_t kMaxUrlBytes = 4096;
constexpr std::size_t kMaxSeeds = 64;

[[noreturn]] void bad(const std::string& what) {
  throw invalid_argument("remote tier URL: " + what);
}

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// Percent-decodes a user or password; `what` names it in errors (which never
// quote it).
std::string decode(std::string_view text, const char* what) {
  std::string out;
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (text[i] != '%') {
      out += text[i];
      continue;
    }
    if (i + 2 >= text.size()) bad(std::string("a malformed percent-escape in the ") + what);
    const int hi = hex_value(text[i + 1]), lo = hex_value(text[i + 2]);
    if (hi < 0 || lo < 0) bad(std::string("a malformed percent-escape in the ") + what);
    out += static_cast<char>(hi * 16 + lo);
    i += 2;
  }
  return out;
}

std::string encode(std::string_view text) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  for (const char c : text) {
    const auto u = static_cast<unsigned char>(c);
    if (std::isalnum(u) || c == '-' || c == '.' || c == '_' || c == '~') {
      out += c;
    } else {
      out += '%';
      out += kHex[u >> 4];
      out += kHex[u & 15];
    }
  }
  return out;
}

std::uint64_t number(std::string_view text, std::uint64_t low, std::uint64_t high, const std::string& what) {
  const auto v = detail::parse_decimal(text, high);
  // (parse_decimal lets a single digit over a `high` under 9 through.)
  if (!v || *v < low || *v > high) {
    bad(what + " must be a number from " + std::to_string(low) + " to " + std::to_string(high));
  }
  return *v;
}

// No ':' (the separator): no prefix is the start of another's keys.
bool valid_prefix(std::string_view p) {
  if (p.empty() || p.size() > 64) return false;
  for (const char c : p) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-')) return false;
  }
  return true;
}

// One host[:port] of the URL.
redis_node parse_node(std::string_view text) {
  redis_node node;
  std::string_view port;
  bool has_port = false;
  if (!text.empty() && text.front() == '[') {
    const auto close = text.find(']');
    if (close == std::string_view::npos) bad("an IPv6 host without its closing ']'");
    node.host = std::string(text.substr(1, close - 1));
    text = text.substr(close + 1);
    if (!text.empty()) {
      if (text.front() != ':') bad("text after the IPv6 host that is not a port");
      port = text.substr(1);
      has_port = true;
    }
    if (node.host.find_first_not_of("0123456789abcdefABCDEF:.") != std::string::npos || node.host.empty()) {
      bad("a malformed IPv6 host");
    }
  } else {
    if (const auto colon = text.find(':'); colon != std::string_view::npos) {
      port = text.substr(colon + 1);
      text = text.substr(0, colon);
      has_port = true;
    }
    node.host = std::string(text);
    if (!redis::valid_redis_host(node.host) || node.host.find(':') != std::string::npos) {
      bad("a missing or malformed host");
    }
  }
  if (has_port) node.port = static_cast<std::uint16_t>(number(port, 1, 65535, "the port"));
  return node;
}

// The URL's hosts: one, or a cluster's seed nodes (comma-separated).
void parse_nodes(std::string_view text, redis_config& c) {
  std::vector<redis_node> nodes;
  for (;;) {
    const auto comma = text.find(',');
    if (nodes.size() == kMaxSeeds) bad("more than " + std::to_string(kMaxSeeds) + " hosts");
    nodes.push_back(parse_node(text.substr(0, comma)));
    if (comma == std::string_view::npos) break;
    text = text.substr(comma + 1);
  }
  c.host = nodes.front().host;
  c.port = nodes.front().port;
  if (nodes.size() > 1) {
    c.cluster = true;
    c.seeds = std::move(nodes);
  }
}

}  // namespace

redis_config parse_redis_url(std::string_view url) {
  if (url.size() > kMaxUrlBytes) bad("longer than " + std::to_string(kMaxUrlBytes) + " bytes");
  constexpr std::string_view kScheme = "redis://";
  if (url.substr(0, kScheme.size()) != kScheme) bad("must start with redis://");
  std::string_view rest = url.substr(kScheme.size());
  redis_config c;

  std::string_view query;
  if (const auto q = rest.find('?'); q != std::string_view::npos) {
    query = rest.substr(q + 1);
    rest = rest.substr(0, q);
  }
  if (rest.find('#') != std::string_view::npos) bad("a fragment (#) is not allowed");
  std::string_view path;
  if (const auto slash = rest.find('/'); slash != std::string_view::npos) {
    path = rest.substr(slash + 1);
    rest = rest.substr(0, slash);
  }
  // Credentials: the last '@' ends them (an unencoded '@' in a password is
  // then still part of it).
  if (const auto at = rest.rfind('@'); at != std::string_view::npos) {
    const std::string_view credentials = rest.substr(0, at);
    rest = rest.substr(at + 1);
    if (const auto colon = credentials.find(':'); colon != std::string_view::npos) {
      c.user = decode(credentials.substr(0, colon), "user");
      c.password = decode(credentials.substr(colon + 1), "password");
    } else {
      c.password = decode(credentials, "password");
    }
    if (c.password.empty()) bad("an empty password");
  }
  parse_nodes(rest, c);
  if (!path.empty()) c.db = static_cast<std::uint32_t>(number(path, 0, 1000000, "the database"));

  std::optional<bool> cluster_option;
  while (!query.empty()) {
    const auto amp = query.find('&');
    const std::string_view item = query.substr(0, amp);
    query = amp == std::string_view::npos ? std::string_view() : query.substr(amp + 1);
    const auto eq = item.find('=');
    if (eq == std::string_view::npos) bad("an option without a value");
    const std::string_view name = item.substr(0, eq), value = item.substr(eq + 1);
    if (name == "prefix") {
      if (!valid_prefix(value)) bad("prefix must be 1 to 64 of A-Z a-z 0-9 . _ -");
      c.prefix = std::string(value);
    } else if (name == "read_only") {
      c.read_only = number(value, 0, 1, "read_only") == 1;
    } else if (name == "connect_timeout_ms") {
      c.connect_timeout_ms = static_cast<std::uint32_t>(number(value, 1, 60000, "connect_timeout_ms"));
    } else if (name == "timeout_ms") {
      c.timeout_ms = static_cast<std::uint32_t>(number(value, 1, 60000, "timeout_ms"));
    } else if (name == "ttl_s") {
      c.ttl_s = static_cast<std::uint32_t>(number(value, 0, 31536000, "ttl_s"));
    } else if (name == "breaker_s") {
      c.breaker_s = static_cast<std::uint32_t>(number(value, 1, 3600, "breaker_s"));
    } else if (name == "lease") {
      c.lease = number(value, 0, 1, "lease") == 1;
    } else if (name == "lease_ms") {
      c.lease_ms = static_cast<std::uint32_t>(number(value, 10, 600000, "lease_ms"));
    } else if (name == "cluster") {
      cluster_option = number(value, 0, 1, "cluster") == 1;
    } else {
      bad("an unknown option (prefix, read_only, connect_timeout_ms, timeout_ms, ttl_s, breaker_s, lease, "
          "lease_ms and cluster are known)");
    }
  }
  if (cluster_option) {
    if (!*cluster_option && c.cluster) bad("cluster=0 with several hosts (several hosts are a cluster's seed nodes)");
    c.cluster = *cluster_option;
  }
  if (c.cluster && c.seeds.empty()) c.seeds.push_back({c.host, c.port});
  if (c.cluster && c.db != 0) bad("the database must be 0 in a cluster (Redis Cluster has only database 0)");
  return c;
}

std::string redis_config::to_string() const {
  std::string url = "redis://";
  if (!password.empty()) {
    if (!user.empty()) url += encode(user) + ":";
    url += "***@";
  }
  const auto add_node = [&url](const std::string& h, std::uint16_t p) {
    const bool ipv6 = h.find(':') != std::string::npos;
    if (ipv6) url += '[';
    url += h;
    if (ipv6) url += ']';
    url += ':';
    url += std::to_string(p);
  };
  if (cluster && !seeds.empty()) {
    for (std::size_t i = 0; i < seeds.size(); ++i) {
      if (i) url += ',';
      add_node(seeds[i].host, seeds[i].port);
    }
  } else {
    add_node(host, port);
  }
  url += '/';
  url += std::to_string(db);
  url += "?prefix=" + prefix + "&read_only=" + (read_only ? "1" : "0") +
         "&connect_timeout_ms=" + std::to_string(connect_timeout_ms) + "&timeout_ms=" + std::to_string(timeout_ms) +
         "&ttl_s=" + std::to_string(ttl_s) + "&breaker_s=" + std::to_string(breaker_s) +
         "&lease=" + (lease ? "1" : "0") + "&lease_ms=" + std::to_string(lease_ms);
  if (cluster) url += "&cluster=1";
  return url;
}

}  // namespace unicache
