// This process's evictor thread: a queue of shard cleanups, merged per
// (directory, shard), run one at a time, and the last uses gets recorded.
#include "store/background_evictor.hpp"

#include <pthread.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <thread>
#include <vector>

#include "store/eviction.hpp"
#include "util/file_io.hpp"
#include "util/mutex.hpp"

namespace unicache::detail {
namespace {

// Named for top -H and debuggers. Its scheduling is the process's: tried
// as SCHED_BATCH (no wake-up preemption, as Mesa's disk-cache queue runs),
// it waited for a busy thread's time slice after each of its disk reads and
// fell minutes behind two threads putting on two cores; at nice 10 it
// starved the same way.
void run_as_background_work() noexcept {
#if defined(__linux__)
  ::pthread_setname_np(::pthread_self(), kBackgroundThreadName);
#endif
}

class evictor final : public background_evictor {
 public:
  pid_t pid() const { return pid_; }

  void request(const std::shared_ptr<store_directory>& directory, const store_config& config, int shard,
               std::string keep, bool walk) noexcept override {
    try {
      if (shard < 0 || shard >= kShards) return;
      mutex_lock l(&mu_);
      if (stopping_) return;
      auto it = std::find_if(jobs_.begin(), jobs_.end(), [&](const job& j) { return j.key == directory.get(); });
      if (it == jobs_.end()) {
        jobs_.emplace_back();
        it = jobs_.end() - 1;
      }
      // A directory at a freed one's address replaces its expired pointer.
      it->directory = directory;
      it->key = directory.get();
      it->config = config;
      const auto i = static_cast<std::size_t>(shard);
      it->requests.clean[i] = true;
      it->requests.walk[i] = it->requests.walk[i] || walk;
      if (!keep.empty()) it->requests.keep[i] = std::move(keep);
      if (!thread_) thread_ = std::make_unique<std::thread>([this] { run(); });
      cv_.notify_all();
    } catch (...) {
      // Out of memory, or no thread to be had: the next put into the
      // shard asks again.
    }
  }

  void record_use(unique_fd file) noexcept override {
    try {
      mutex_lock l(&mu_);
      if (stopping_ || uses_.size() >= kMaxPendingUses) return;  // dropped: closes the file
      uses_.push_back(std::move(file));
      if (!thread_) thread_ = std::make_unique<std::thread>([this] { run(); });
      cv_.notify_all();
    } catch (...) {
      // Out of memory, or no thread to be had: this use goes unrecorded.
    }
  }

  void forget(const store_directory* directory) noexcept override {
    mutex_lock l(&mu_);
    std::erase_if(jobs_, [&](const job& j) { return j.key == directory; });
    if (running_ != directory) return;
    cancel_.store(true, std::memory_order_relaxed);
    mu_.wait(cv_, [&]() ABSL_NO_THREAD_SAFETY_ANALYSIS { return running_ != directory; });
  }

  void wait_idle() noexcept override {
    mutex_lock l(&mu_);
    mu_.wait(cv_, [&]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
      return (jobs_.empty() && running_ == nullptr && uses_.empty() && !recording_) || !thread_;
    });
  }

  // At exit: the cleanup in progress stops after its batch; the thread ends.
  void stop() noexcept {
    std::thread* thread = nullptr;
    {
      mutex_lock l(&mu_);
      stopping_ = true;  // from now on no thread is started
      cancel_.store(true, std::memory_order_relaxed);
      cv_.notify_all();
      thread = thread_.get();
    }
    if (thread && thread->joinable()) thread->join();
  }

 private:
  struct job {
    std::weak_ptr<store_directory> directory;
    const store_directory* key = nullptr;  // compared only, never dereferenced
    store_config config;
    shard_requests requests;
  };

  // Sets each pending file's mtime to now (last use), outside the lock.
  void record_uses() {
    std::vector<unique_fd> files;
    {
      mutex_lock l(&mu_);
      if (uses_.empty()) return;
      files.swap(uses_);
      recording_ = true;
    }
    for (const unique_fd& f : files) set_mtime_now(f.get());
    files.clear();  // closed before wait_idle's callers hear of it
    mutex_lock l(&mu_);
    recording_ = false;
    cv_.notify_all();
  }

  void run() {
    run_as_background_work();
    for (;;) {
      record_uses();
      job j;
      std::shared_ptr<store_directory> d;
      {
        mutex_lock l(&mu_);
        mu_.wait(cv_, [&]() ABSL_NO_THREAD_SAFETY_ANALYSIS { return stopping_ || !jobs_.empty() || !uses_.empty(); });
        if (stopping_) {
          jobs_.clear();
          uses_.clear();
          cv_.notify_all();
          return;
        }
        // Uses recorded before any cleanup that was asked for after them:
        // its walk sees them.
        if (!uses_.empty() || jobs_.empty()) continue;
        j = std::move(jobs_.front());
        jobs_.erase(jobs_.begin());
        d = j.directory.lock();
        running_ = d.get();
        cancel_.store(false, std::memory_order_relaxed);
      }
      if (d && d->writable()) {
        try {
          clean_shards(*d, j.config, j.requests, &cancel_);
        } catch (...) {
          // Out of memory during a walk: the next put asks again.
        }
      }
      d.reset();  // before running_ clears: forget()'s caller may then destroy it
      mutex_lock l(&mu_);
      running_ = nullptr;
      cv_.notify_all();
    }
  }

  const pid_t pid_ = ::getpid();
  mutex mu_;
  std::condition_variable_any cv_;
  std::vector<job> jobs_ ABSL_GUARDED_BY(mu_);
  static constexpr std::size_t kMaxPendingUses = 64;
  std::vector<unique_fd> uses_ ABSL_GUARDED_BY(mu_);
  bool recording_ ABSL_GUARDED_BY(mu_) = false;
  const store_directory* running_ ABSL_GUARDED_BY(mu_) = nullptr;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::atomic<bool> cancel_{false};
  std::unique_ptr<std::thread> thread_ ABSL_GUARDED_BY(mu_);
};

// Never destroyed: in a child of fork() the parent's evictor (its mutex
// possibly held by a thread that does not exist there) is left alone and a
// new one made.
std::atomic<evictor*> current{nullptr};

evictor* of_this_process() {
  evictor* e = current.load(std::memory_order_acquire);
  return e && e->pid() == ::getpid() ? e : nullptr;
}

}  // namespace

background_evictor& background_evictor::instance() {
  for (;;) {
    evictor* e = current.load(std::memory_order_acquire);
    if (e && e->pid() == ::getpid()) return *e;
    auto* fresh = new evictor;
    if (current.compare_exchange_strong(e, fresh, std::memory_order_acq_rel)) {
      // Registered once per process lineage: a child inherits the handler,
      // which stops whichever evictor belongs to the process that exits.
      static const bool registered = [] {
        std::atexit([] {
          if (evictor* mine = of_this_process()) mine->stop();
        });
        return true;
      }();
      (void)registered;
      return *fresh;
    }
    delete fresh;
  }
}

background_evictor* background_evictor::existing() {
  return of_this_process();
}

}  // namespace unicache::detail
