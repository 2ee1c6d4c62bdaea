// redis_cluster.hpp's checks of what cluster nodes answer: key slots,
// MOVED and ASK redirections, CLUSTER SLOTS replies. Untrusted input: out of
// shape or range is nullopt, never a crash.
#include <optional>
#include <string>
#include <string_view>

#include "absl/container/flat_hash_map.h"
#include "remote/redis_cluster.hpp"
#include "util/env.hpp"
#include "util/parse.hpp"

namespace unicache::redis {

using namespace unicache::detail;  // the core's store internals (entry format, tiers, utilities)
namespace {

// An announced host: empty, "?" (or nil) means the answering node's.
std::optional<std::string> announced_host(std::string_view host, std::string_view answering_host) {
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  if (host.empty() || host == "?") return std::string(answering_host);
  if (!valid_redis_host(host)) return std::nullopt;
  return std::string(host);
}

}  // namespace

std::string node_name(const redis_node& n) {
  return (n.host.find(':') != std::string::npos ? "[" + n.host + "]" : n.host) + ":" + std::to_string(n.port);
}

std::uint16_t crc16(std::string_view data) {
  std::uint16_t crc = 0;
  for (const char c : data) {
    crc ^= static_cast<std::uint16_t>(static_cast<unsigned char>(c) << 8);
    for (int bit = 0; bit < 8; ++bit) {
      crc = static_cast<std::uint16_t>(crc & 0x8000 ? (crc << 1) ^ 0x1021 : crc << 1);
    }
  }
  return crc;
}

std::uint16_t key_slot(std::string_view key) {
  if (const auto open = key.find('{'); open != std::string_view::npos) {
    const auto close = key.find('}', open + 1);
    if (close != std::string_view::npos && close > open + 1) key = key.substr(open + 1, close - open - 1);
  }
  return static_cast<std::uint16_t>(crc16(key) % kClusterSlots);
}

std::optional<redis_redirect> parse_redirect(std::string_view error, std::string_view answering_host) {
  redis_redirect r;
  if (error.starts_with("MOVED ")) {
    error.remove_prefix(6);
  } else if (error.starts_with("ASK ")) {
    r.ask = true;
    error.remove_prefix(4);
  } else {
    return std::nullopt;
  }
  const auto space = error.find(' ');
  if (space == std::string_view::npos) return std::nullopt;
  const auto slot = parse_decimal(error.substr(0, space), kClusterSlots - 1);
  const std::string_view target = error.substr(space + 1);
  const auto colon = target.rfind(':');
  if (!slot || colon == std::string_view::npos) return std::nullopt;
  const auto port = parse_decimal(target.substr(colon + 1), 65535);
  auto host = announced_host(target.substr(0, colon), answering_host);
  if (!port || *port == 0 || !host) return std::nullopt;
  r.slot = static_cast<std::uint16_t>(*slot);
  r.target = {std::move(*host), static_cast<std::uint16_t>(*port)};
  return r;
}

std::optional<cluster_slot_map> parse_cluster_slots(const redis_element& reply, std::string_view answering_host,
                                                    std::string& why) {
  using kind = redis_element::kind;
  const auto fail = [&](std::string what) -> std::optional<cluster_slot_map> {
    why = std::move(what);
    return std::nullopt;
  };
  if (reply.type != kind::array) return fail("the reply is not an array");
  if (reply.elements.empty()) return fail("no slot is assigned to any node");
  if (reply.elements.size() > kClusterSlots) return fail("more ranges than slots");
  cluster_slot_map map;
  map.slot_master.fill(cluster_slot_map::kNoMaster);
  absl::flat_hash_map<std::string, std::uint16_t> index;
  for (const redis_element& range : reply.elements) {
    if (range.type != kind::array || range.elements.size() < 3) {
      return fail("a range that is not [start, end, master, ...]");
    }
    const redis_element &start = range.elements[0], &end = range.elements[1], &master = range.elements[2];
    if (start.type != kind::integer || end.type != kind::integer || start.integer < 0 || start.integer > end.integer ||
        end.integer >= static_cast<std::int64_t>(kClusterSlots)) {
      return fail("a slot range out of 0..16383");
    }
    if (master.type != kind::array || master.elements.size() < 2) return fail("a master that is not [host, port, ...]");
    const redis_element &host = master.elements[0], &port = master.elements[1];
    if ((host.type != kind::text && host.type != kind::nil) || port.type != kind::integer || port.integer < 1 ||
        port.integer > 65535) {
      return fail("a master's host or port out of shape or range");
    }
    auto address = announced_host(host.type == kind::nil ? "?" : host.text, answering_host);
    if (!address) return fail("a master's host " + quoted(host.text, 80) + " that is not a host name or address");
    redis_node node{std::move(*address), static_cast<std::uint16_t>(port.integer)};
    const auto [it, added] = index.try_emplace(node_name(node), static_cast<std::uint16_t>(map.masters.size()));
    if (added) {
      if (map.masters.size() == cluster_slot_map::kMaxMasters) return fail("more than 1024 masters");
      map.masters.push_back(std::move(node));
    }
    for (auto slot = start.integer; slot <= end.integer; ++slot) {
      std::uint16_t& owner = map.slot_master[static_cast<std::size_t>(slot)];
      if (owner != cluster_slot_map::kNoMaster) return fail("ranges that overlap");
      owner = it->second;
    }
  }
  return map;
}

}  // namespace unicache::redis
