// redis_connection (remote/redis_client.hpp) on hiredis's blocking API.
#include "remote/redis_client.hpp"

#include <hiredis/hiredis.h>
#include <pthread.h>
#include <signal.h>
#include <sys/time.h>

#include <algorithm>
#include <cerrno>
#include <memory>
#include <cstring>
#include <ctime>
#include <string>
#include <vector>

namespace unicache::detail {
namespace {

timeval to_timeval(std::uint32_t ms) {
  return {static_cast<time_t>(ms / 1000), static_cast<suseconds_t>(ms % 1000) * 1000};
}

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

}  // namespace

const char* to_string(remote_status s) {
  switch (s) {
    case remote_status::ok: return "ok";
    case remote_status::hit: return "hit";
    case remote_status::miss: return "miss";
    case remote_status::error: return "error";
    case remote_status::timeout: return "timeout";
  }
  return "unknown";
}

redis_connection::redis_connection(remote_config config) : config_(std::move(config)) {}

redis_connection::~redis_connection() {
  if (context_) redisFree(context_);
}

// An I/O error of the context (which is then dropped): a timeout when the
// socket's timeout expired, else an error.
remote_result redis_connection::failure(const char* what) {
  remote_result r;
  const int err = context_ ? context_->err : REDIS_ERR_OTHER;
  const std::string detail = context_ ? context_->errstr : "no context";
  const bool timed_out = err == REDIS_ERR_IO && (errno == EAGAIN || errno == EWOULDBLOCK || errno == ETIMEDOUT ||
                                                 detail.find("timed out") != std::string::npos ||
                                                 detail.find("Resource temporarily unavailable") != std::string::npos);
  r.status = timed_out ? remote_status::timeout : remote_status::error;
  r.message = std::string(what) + " " + config_.to_string() + ": " + (detail.empty() ? "failed" : detail);
  if (context_) {
    redisFree(context_);
    context_ = nullptr;
  }
  return r;
}

remote_result redis_connection::connect() {
  context_ = redisConnectWithTimeout(config_.host.c_str(), config_.port, to_timeval(config_.connect_timeout_ms));
  if (!context_) return {remote_status::error, {}, "connecting to " + config_.to_string() + ": out of memory"};
  if (context_->err) return failure("connecting to");
  if (redisSetTimeout(context_, to_timeval(config_.timeout_ms)) != REDIS_OK) return failure("setting the timeout of");
  auto hello = [&](std::vector<std::string_view> args, const char* what) -> remote_result {
    std::vector<const char*> argv;
    std::vector<std::size_t> lens;
    for (const std::string_view a : args) {
      argv.push_back(a.data());
      lens.push_back(a.size());
    }
    reply_ptr reply(static_cast<redisReply*>(
        redisCommandArgv(context_, static_cast<int>(argv.size()), argv.data(), lens.data())));
    if (!reply) return failure(what);
    if (reply->type == REDIS_REPLY_ERROR) {
      // The server's message may quote a command, never our password: AUTH's
      // errors are fixed texts ("WRONGPASS ...", "NOAUTH ...").
      remote_result r{remote_status::error, {}, std::string(what) + " " + config_.to_string() + ": " +
                                                    std::string(reply->str, reply->len)};
      redisFree(context_);
      context_ = nullptr;
      return r;
    }
    return {remote_status::ok, {}, {}};
  };
  if (!config_.password.empty()) {
    remote_result r = config_.user.empty() ? hello({"AUTH", config_.password}, "authenticating to")
                                           : hello({"AUTH", config_.user, config_.password}, "authenticating to");
    if (r.status != remote_status::ok) return r;
  }
  if (config_.db != 0) {
    const std::string db = std::to_string(config_.db);
    remote_result r = hello({"SELECT", db}, "selecting the database of");
    if (r.status != remote_status::ok) return r;
  }
  return {remote_status::ok, {}, {}};
}

remote_result redis_connection::run(const std::vector<std::string_view>& args, std::size_t max_bytes,
                                    std::vector<std::string>* array) {
  sigpipe_guard no_sigpipe;
  std::vector<const char*> argv;
  std::vector<std::size_t> lens;
  for (const std::string_view a : args) {
    argv.push_back(a.data());
    lens.push_back(a.size());
  }
  // A connection made earlier may have been closed by a server that has
  // restarted since: an I/O error on it (not a timeout) is tried once more
  // on a new connection.
  const bool reused = context_ != nullptr;
  reply_ptr reply;
  for (int attempt = 0; attempt < 2 && !reply; ++attempt) {
    if (!context_) {
      remote_result r = connect();
      if (r.status != remote_status::ok) return r;
    }
    reply.reset(
        static_cast<redisReply*>(redisCommandArgv(context_, static_cast<int>(argv.size()), argv.data(), lens.data())));
    if (reply) break;
    remote_result r = failure("talking to");
    if (!reused || attempt == 1 || r.status == remote_status::timeout) return r;
  }
  remote_result r;
  switch (reply->type) {
    case REDIS_REPLY_NIL:
      r.status = remote_status::miss;
      break;
    case REDIS_REPLY_ERROR:
      r.status = remote_status::error;
      r.message = "the server " + config_.to_string() + " answered " + std::string(args.front()) + ": " +
                  std::string(reply->str, std::min<std::size_t>(reply->len, 200));
      break;
    case REDIS_REPLY_INTEGER: {
      r.status = remote_status::ok;
      const std::string text = std::to_string(reply->integer);
      r.value.assign(text.begin(), text.end());
      break;
    }
    case REDIS_REPLY_ARRAY: {
      r.status = remote_status::ok;
      const std::string text = std::to_string(reply->elements);
      r.value.assign(text.begin(), text.end());
      if (array) {
        // SCAN: [cursor, [keys...]]; other arrays: their string elements.
        const bool scan_reply = reply->elements == 2 && reply->element[1]->type == REDIS_REPLY_ARRAY;
        const redisReply* items = scan_reply ? reply->element[1] : reply.get();
        if (scan_reply && reply->element[0]->type == REDIS_REPLY_STRING) {
          r.value.assign(reply->element[0]->str, reply->element[0]->str + reply->element[0]->len);
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
        r.status = remote_status::miss;
        r.message = "a value over " + std::to_string(max_bytes) + " bytes";
      } else {
        r.status = remote_status::ok;
        r.value.assign(reply->str, reply->str + reply->len);
      }
  }
  return r;
}

remote_result redis_connection::get(std::string_view key, std::size_t max_bytes) {
  // GETRANGE reads at most max_bytes + 1 bytes, however large the value is;
  // a missing key reads as empty (and no value of ours is empty).
  const std::string last = std::to_string(max_bytes);
  remote_result r = run({"GETRANGE", key, "0", last}, max_bytes + 1);
  if (r.status != remote_status::ok) return r;
  if (r.value.empty()) return {remote_status::miss, {}, {}};
  if (r.value.size() > max_bytes) return {remote_status::miss, {}, "a value over " + last + " bytes"};
  r.status = remote_status::hit;
  return r;
}

remote_result redis_connection::set(std::string_view key, std::span<const unsigned char> value) {
  const std::string_view bytes(reinterpret_cast<const char*>(value.data()), value.size());
  const std::string ttl = std::to_string(config_.ttl_s);
  remote_result r = config_.ttl_s ? run({"SET", key, bytes, "EX", ttl}, 64) : run({"SET", key, bytes}, 64);
  if (r.status == remote_status::ok) r.value.clear();
  return r;
}

remote_result redis_connection::del(std::string_view key) { return run({"DEL", key}, 64); }

remote_result redis_connection::hgetall(std::string_view key, std::vector<std::string>& pairs) {
  return run({"HGETALL", key}, 64, &pairs);
}

remote_result redis_connection::scan(std::string_view cursor, std::string_view pattern,
                                     std::vector<std::string>& keys) {
  return run({"SCAN", cursor, "MATCH", pattern, "COUNT", "1000"}, 64, &keys);
}

remote_result redis_connection::command(std::initializer_list<std::string_view> args) {
  return run(std::vector<std::string_view>(args), std::size_t{1} << 20);
}

}  // namespace unicache::detail
