// redis_connection (remote/redis_client.hpp): hiredis's command encoder
// and reply parser over a non-blocking socket that this file polls.
#include "remote/redis_client.hpp"

#include <hiredis/hiredis.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <ctime>
#include <memory>
#include <string>
#include <vector>

#include "util/env.hpp"

namespace unicache::redis {

using namespace unicache::detail;  // the core's store internals (entry format, tiers, utilities)
namespace {

// SIGPIPE is blocked in this thread while a command runs; one that the
// command raised is taken off the thread's pending set before the mask is
// restored, so it is never delivered. One that was pending before is left
// pending. (hiredis writes with write(2), which has no MSG_NOSIGNAL.)
class sigpipe_guard {
 public:
  sigpipe_guard() {
    sigemptyset(&pipe_);
    sigaddset(&pipe_, SIGPIPE);
    sigset_t pending;
    sigemptyset(&pending);
    sigpending(&pending);
    was_pending_ = sigismember(&pending, SIGPIPE) == 1;
    pthread_sigmask(SIG_BLOCK, &pipe_, &saved_);
  }
  ~sigpipe_guard() {
    if (!was_pending_) {
      const timespec zero{0, 0};
      while (sigtimedwait(&pipe_, nullptr, &zero) == SIGPIPE) {
      }
    }
    pthread_sigmask(SIG_SETMASK, &saved_, nullptr);
  }
  sigpipe_guard(const sigpipe_guard&) = delete;
  sigpipe_guard& operator=(const sigpipe_guard&) = delete;

 private:
  sigset_t pipe_{}, saved_{};
  bool was_pending_ = false;
};

struct reply_deleter {
  void operator()(redisReply* r) const { freeReplyObject(r); }
};
using reply_ptr = std::unique_ptr<redisReply, reply_deleter>;

// `r` as a tree, at most `depth` arrays deep: false for one deeper.
bool to_element(const redisReply& r, int depth, redis_element& out) {
  switch (r.type) {
    case REDIS_REPLY_INTEGER:
      out.type = redis_element::kind::integer;
      out.integer = r.integer;
      return true;
    case REDIS_REPLY_STRING:
    case REDIS_REPLY_STATUS:
    case REDIS_REPLY_ERROR:
      out.type = redis_element::kind::text;
      out.text.assign(r.str, r.len);
      return true;
    case REDIS_REPLY_ARRAY:
      if (depth == 0) return false;
      out.type = redis_element::kind::array;
      out.elements.resize(r.elements);
      for (std::size_t i = 0; i < r.elements; ++i) {
        if (!to_element(*r.element[i], depth - 1, out.elements[i])) return false;
      }
      return true;
    default:  // nil, and RESP3's types (never asked for)
      out.type = redis_element::kind::nil;
      return true;
  }
}

constexpr std::size_t kMaxServerErrorBytes = 512;

}  // namespace

bool valid_redis_host(std::string_view host) {
  if (host.empty() || host.size() > 253) return false;
  for (const char c : host) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-' || c == '_' || c == ':')) return false;
  }
  return true;
}

const char* to_string(redis_status s) {
  switch (s) {
    case redis_status::ok: return "ok";
    case redis_status::hit: return "hit";
    case redis_status::miss: return "miss";
    case redis_status::error: return "error";
    case redis_status::timeout: return "timeout";
    case redis_status::refused: return "refused";
    case redis_status::unavailable: return "unavailable";
  }
  return "unknown";
}

redis_connection::redis_connection(redis_config config) : config_(std::move(config)) {}

redis_connection::~redis_connection() {
  if (context_) redisFree(context_);
}

// Drops the context after a failure, and describes it (server text
// escaped: it is untrusted).
redis_result redis_connection::failure(redis_status status, const char* what, const std::string& detail) {
  redis_result r;
  r.status = status;
  r.message = std::string(what) + " " + config_.to_string() + ": " + (detail.empty() ? "failed" : quoted(detail, 200));
  if (context_) {
    redisFree(context_);
    context_ = nullptr;
  }
  return r;
}

namespace {

// Waits until `fd` is ready for `events` or `deadline` passes: 1 ready, 0 the
// deadline, -1 an error.
int wait_for(int fd, short events, std::chrono::steady_clock::time_point deadline) {
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return 0;
    pollfd p{fd, events, 0};
    const int n = ::poll(&p, 1, static_cast<int>(std::min<std::int64_t>(left.count(), 60000)));
    if (n > 0) return (p.revents & (POLLERR | POLLNVAL)) && !(p.revents & events) ? -1 : 1;
    if (n == 0) continue;  // the loop checks the deadline again
    if (errno != EINTR) return -1;
  }
}

}  // namespace

// One command on the non-blocking context, the whole exchange bounded by
// `deadline`, the reply by `max_reply_bytes` (a server that sends more is
// an error, whatever it sends).
redis_result redis_connection::exchange(const std::vector<std::string_view>& args,
                                         std::chrono::steady_clock::time_point deadline, std::size_t max_reply_bytes,
                                         redisReply** out) {
  std::vector<const char*> argv;
  std::vector<std::size_t> lens;
  for (const std::string_view a : args) {
    argv.push_back(a.data());
    lens.push_back(a.size());
  }
  if (redisAppendCommandArgv(context_, static_cast<int>(argv.size()), argv.data(), lens.data()) != REDIS_OK) {
    return failure(redis_status::error, "sending to", context_->errstr);
  }
  for (int done = 0; !done;) {
    if (redisBufferWrite(context_, &done) != REDIS_OK) return failure(redis_status::error, "writing to", context_->errstr);
    if (done) break;
    const int ready = wait_for(context_->fd, POLLOUT, deadline);
    if (ready == 0) return failure(redis_status::timeout, "writing to", "timed out");
    if (ready < 0) return failure(redis_status::error, "writing to", std::strerror(errno));
  }
  void* reply = nullptr;
  for (;;) {
    if (redisGetReplyFromReader(context_, &reply) != REDIS_OK) {
      return failure(redis_status::error, "reading from", context_->errstr);
    }
    if (reply) break;
    if (context_->reader && context_->reader->len > max_reply_bytes + 65536) {
      return failure(redis_status::error, "reading from", "a reply over " + std::to_string(max_reply_bytes) + " bytes");
    }
    const int ready = wait_for(context_->fd, POLLIN, deadline);
    if (ready == 0) return failure(redis_status::timeout, "reading from", "timed out");
    if (ready < 0) return failure(redis_status::error, "reading from", std::strerror(errno));
    // Read what the socket has in one call (hiredis's own reads are 16 KB)
    // and feed it to the reply parser.
    thread_local std::vector<char> chunk(std::size_t{256} << 10);  // per reading thread
    const ssize_t n = ::read(context_->fd, chunk.data(), chunk.size());
    if (n == 0) return failure(redis_status::error, "reading from", "the server closed the connection");
    if (n < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) continue;
      return failure(redis_status::error, "reading from", std::strerror(errno));
    }
    if (redisReaderFeed(context_->reader, chunk.data(), static_cast<std::size_t>(n)) != REDIS_OK) {
      return failure(redis_status::error, "reading from", context_->reader->errstr);
    }
  }
  *out = static_cast<redisReply*>(reply);
  return {redis_status::ok, {}, {}};
}

redis_result redis_connection::connect() {
  // Name resolution (getaddrinfo) is not bounded by the timeout: give an
  // address, or a name /etc/hosts resolves, where DNS may stall.
  context_ = redisConnectNonBlock(config_.host.c_str(), config_.port);
  if (!context_) return {redis_status::error, {}, "connecting to " + config_.to_string() + ": out of memory"};
  if (context_->err) return failure(redis_status::error, "connecting to", context_->errstr);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(config_.connect_timeout_ms);
  const int ready = wait_for(context_->fd, POLLOUT, deadline);
  if (ready == 0) return failure(redis_status::timeout, "connecting to", "timed out");
  int so_error = 0;
  socklen_t len = sizeof so_error;
  if (ready < 0 || ::getsockopt(context_->fd, SOL_SOCKET, SO_ERROR, &so_error, &len) != 0 || so_error != 0) {
    return failure(redis_status::error, "connecting to", std::strerror(so_error ? so_error : errno));
  }
  auto hello = [&](std::vector<std::string_view> args, const char* what) -> redis_result {
    redisReply* raw = nullptr;
    redis_result r = exchange(args, std::chrono::steady_clock::now() + std::chrono::milliseconds(config_.timeout_ms),
                               4096, &raw);
    if (r.status != redis_status::ok) return r;
    reply_ptr reply(raw);
    if (reply->type == REDIS_REPLY_ERROR) {
      // AUTH's errors are fixed texts ("WRONGPASS ...", "NOAUTH ..."): they
      // never quote the password.
      return failure(redis_status::error, what, std::string(reply->str, reply->len));
    }
    return {redis_status::ok, {}, {}};
  };
  if (!config_.password.empty()) {
    redis_result r = config_.user.empty() ? hello({"AUTH", config_.password}, "authenticating to")
                                           : hello({"AUTH", config_.user, config_.password}, "authenticating to");
    if (r.status != redis_status::ok) return r;
  }
  if (config_.db != 0) {
    const std::string db = std::to_string(config_.db);
    redis_result r = hello({"SELECT", db}, "selecting the database of");
    if (r.status != redis_status::ok) return r;
  }
  return {redis_status::ok, {}, {}};
}

redis_result redis_connection::run(const std::vector<std::string_view>& args, std::size_t max_bytes,
                                    std::vector<std::string>* array, redis_element* tree) {
  sigpipe_guard no_sigpipe;
  server_error_.clear();
  // A connection made earlier may have been closed by a server that has
  // restarted since: an error on it (not a timeout) is tried once more on
  // a new connection, within the same deadline.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(config_.timeout_ms);
  const bool reused = context_ != nullptr;
  reply_ptr reply;
  for (int attempt = 0; attempt < 2 && !reply; ++attempt) {
    if (!context_) {
      redis_result r = connect();
      if (r.status != redis_status::ok) return r;
    }
    redisReply* raw = nullptr;
    redis_result r = exchange(args, deadline, max_bytes + 1024, &raw);
    if (r.status == redis_status::ok) {
      reply.reset(raw);
      break;
    }
    if (!reused || attempt == 1 || r.status == redis_status::timeout) return r;
  }
  if (tree && reply->type != REDIS_REPLY_ERROR && !to_element(*reply, 8, *tree)) {
    return failure(redis_status::error, "reading from", "a reply nested deeper than 8 arrays");
  }
  redis_result r;
  switch (reply->type) {
    case REDIS_REPLY_NIL:
      r.status = redis_status::miss;
      break;
    case REDIS_REPLY_ERROR:
      r.status = redis_status::refused;
      server_error_.assign(reply->str, std::min(reply->len, kMaxServerErrorBytes));
      r.message = "the server " + config_.to_string() + " answered " + std::string(args.front()) + ": " +
                  quoted(std::string_view(reply->str, reply->len), 200);
      break;
    case REDIS_REPLY_INTEGER: {
      r.status = redis_status::ok;
      const std::string text = std::to_string(reply->integer);
      r.value.assign(text.begin(), text.end());
      break;
    }
    case REDIS_REPLY_ARRAY: {
      r.status = redis_status::ok;
      const std::string text = std::to_string(reply->elements);
      r.value.assign(text.begin(), text.end());
      if (array) {
        // SCAN: [cursor, [keys...]]; other arrays: their string elements.
        const bool scan_reply = reply->elements == 2 && reply->element[1]->type == REDIS_REPLY_ARRAY;
        const redisReply* items = scan_reply ? reply->element[1] : reply.get();
        if (scan_reply) {
          // The next cursor; anything else ends the walk ("0").
          const redisReply* cursor = reply->element[0];
          const bool digits = cursor->type == REDIS_REPLY_STRING && cursor->len > 0 && cursor->len <= 20 &&
                              std::string_view(cursor->str, cursor->len).find_first_not_of("0123456789") ==
                                  std::string_view::npos;
          r.value = digits ? byte_vector(cursor->str, cursor->str + cursor->len) : byte_vector{'0'};
        }
        for (std::size_t i = 0; i < items->elements; ++i) {
          const redisReply* e = items->element[i];
          if (e->type == REDIS_REPLY_STRING) array->emplace_back(e->str, e->len);
        }
      }
      break;
    }
    default:  // status, string
      if (reply->len > max_bytes) {
        r.status = redis_status::miss;
        r.message = "a value over " + std::to_string(max_bytes) + " bytes";
      } else {
        r.status = redis_status::ok;
        r.value.assign(reply->str, reply->str + reply->len);
      }
  }
  return r;
}

redis_result redis_connection::get(std::string_view key, std::size_t max_bytes) {
  // GETRANGE reads at most max_bytes + 1 bytes, however large the value is;
  // a missing key reads as empty (and no value of ours is empty).
  const std::string last = std::to_string(max_bytes);
  redis_result r = run({"GETRANGE", key, "0", last}, max_bytes + 1);
  if (r.status != redis_status::ok) return r;
  if (r.value.empty()) return {redis_status::miss, {}, {}};
  if (r.value.size() > max_bytes) return {redis_status::miss, {}, "a value over " + last + " bytes"};
  r.status = redis_status::hit;
  return r;
}

redis_result redis_connection::set(std::string_view key, std::span<const unsigned char> value) {
  const std::string_view bytes(reinterpret_cast<const char*>(value.data()), value.size());
  const std::string ttl = std::to_string(config_.ttl_s);
  redis_result r = config_.ttl_s ? run({"SET", key, bytes, "EX", ttl}, 64) : run({"SET", key, bytes}, 64);
  if (r.status == redis_status::ok) r.value.clear();
  return r;
}

redis_result redis_connection::del(std::string_view key) { return run({"DEL", key}, 64); }

redis_result redis_connection::hgetall(std::string_view key, std::vector<std::string>& pairs) {
  return run({"HGETALL", key}, 64 << 10, &pairs);
}

redis_result redis_connection::scan(std::string_view cursor, std::string_view pattern,
                                     std::vector<std::string>& keys) {
  return run({"SCAN", cursor, "MATCH", pattern, "COUNT", "1000"}, 8 << 20, &keys);
}

redis_result redis_connection::command(std::initializer_list<std::string_view> args) {
  return run(std::vector<std::string_view>(args), std::size_t{1} << 20);
}

redis_result redis_connection::command(const std::vector<std::string_view>& args) {
  return run(args, std::size_t{1} << 20);
}

redis_result redis_connection::command(const std::vector<std::string_view>& args, std::size_t max_bytes,
                                        redis_element& reply) {
  reply = redis_element{};
  return run(args, max_bytes, nullptr, &reply);
}

}  // namespace unicache::redis
