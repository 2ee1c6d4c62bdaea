// A connection to a Redis server on hiredis, with the remote tier's rules:
// bounded connect and command times (the whole exchange of a command, on a
// non-blocking socket: a server that trickles its reply still times out), a
// timeout told from other errors, bounded replies, and no SIGPIPE (a peer
// that closed the socket never kills the process).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "unicache/remote.hpp"
#include "unicache/store.hpp"

struct redisContext;
struct redisReply;

namespace unicache::redis {

enum class redis_status : std::uint8_t {
  ok,       // stored, removed, or a command that answered
  hit,      // get found a value
  miss,     // get found none (or one over the size bound)
  error,    // refused connection, closed, a protocol error, a reply too large
  timeout,  // connect or the whole command took longer than its timeout
  refused,  // the server answered with an error (WRONGTYPE, NOPERM, OOM, ...); the connection is fine
  unavailable,  // a cluster: the node of the key's slot is down, the others answer (redis_cluster.hpp)
};
const char* to_string(redis_status s);

struct redis_result {
  redis_status status = redis_status::error;
  byte_vector value;     // get: the value; command: a status, integer or bulk reply as text
  std::string message;   // error and timeout: what happened (never a password)
};

// A reply as the server nested it (redis_connection::command with a
// reply tree): what command()'s text cannot hold, e.g. CLUSTER SLOTS.
struct redis_element {
  enum class kind : std::uint8_t { nil, text, integer, array };
  kind type = kind::nil;
  std::string text;      // a string, status or error reply
  std::int64_t integer = 0;
  std::vector<redis_element> elements;  // an array's
};

// Whether `host` is one a connection may be pointed at: 1..253 of
// [A-Za-z0-9.-_:] (a name, an IPv4 address, an IPv6 address without
// brackets). The URL parser and the cluster router (for addresses servers
// announce) check by it.
bool valid_redis_host(std::string_view host);

// Used by one thread at a time; it connects on first use and again after an
// error (each attempt bounded by connect_timeout_ms).
class redis_connection {
 public:
  explicit redis_connection(redis_config config);
  ~redis_connection();
  redis_connection(const redis_connection&) = delete;
  redis_connection& operator=(const redis_connection&) = delete;

  // The value under `key`: hit, miss (none, or longer than `max_bytes`:
  // it is not read past that), error or timeout.
  redis_result get(std::string_view key, std::size_t max_bytes);
  // SET, with EX ttl_s when the configuration has one: ok, error or timeout.
  redis_result set(std::string_view key, std::span<const unsigned char> value);
  // DEL: ok (value "1" if it was there, "0" if not), error or timeout.
  redis_result del(std::string_view key);
  // Any command, its arguments as given: ok with a status, integer or bulk
  // reply as text (an array's first element count as "n"), miss for nil.
  redis_result command(std::initializer_list<std::string_view> args);
  redis_result command(const std::vector<std::string_view>& args);
  // The same, the whole reply in `reply` as a tree: ok, or error for a
  // reply nested deeper than 8 or over `max_bytes` (an error reply is
  // refused, as above).
  redis_result command(const std::vector<std::string_view>& args, std::size_t max_bytes, redis_element& reply);

  // One SCAN step from `cursor` over keys matching `pattern`: ok with the
  // next cursor as the value ("0" when done), the keys appended to `keys`.
  redis_result scan(std::string_view cursor, std::string_view pattern, std::vector<std::string>& keys);

  // HGETALL: ok, the field and value pairs appended to `pairs` (field, value, ...).
  redis_result hgetall(std::string_view key, std::vector<std::string>& pairs);

  const redis_config& config() const { return config_; }
  // The bound of each later command, as config().timeout_ms (the cluster
  // router gives each try what is left of its operation's time).
  void set_timeout_ms(std::uint32_t ms) { config_.timeout_ms = ms; }
  // The text of the last command's error reply ("MOVED 3999 10.0.0.2:6379"),
  // at most 512 bytes; "" when it answered otherwise or failed. The
  // server's own words, unescaped: quote them before printing.
  const std::string& server_error() const { return server_error_; }

 private:
  redis_result connect();
  redis_result run(const std::vector<std::string_view>& args, std::size_t max_bytes,
                    std::vector<std::string>* array = nullptr, redis_element* tree = nullptr);
  redis_result exchange(const std::vector<std::string_view>& args, std::chrono::steady_clock::time_point deadline,
                         std::size_t max_reply_bytes, redisReply** out);
  redis_result failure(redis_status status, const char* what, const std::string& detail);

  redis_config config_;
  redisContext* context_ = nullptr;
  std::string server_error_;
};

}  // namespace unicache::redis
