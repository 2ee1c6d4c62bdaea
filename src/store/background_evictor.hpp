// The thread that cleans store shards for this process's puts, so that a
// put that finds its shard over its share of the limit returns at once, and
// records the last use of the entries gets read, so that a get never writes
// to the filesystem.
//
// One per process, started at the first request. A request names a store
// directory (held weakly: a store that goes away cancels its requests), a
// shard and the settings of the put that made it; the requests for one
// directory that wait are merged into one job. The job's shards are cleaned
// first (never removing the entry each one's put reported as stored), then
// every other shard whose record says it is over its share or due its walk.
// The thread stops at exit, after the walk or batch in progress (a batch
// holds a shard's lock for milliseconds; a walk of a sixteenth of the store
// takes about 10 µs per entry); what it did not finish, the next put into
// that shard asks for again. Another process
// cleaning the same shard at once is harmless: every batch rechecks the
// shard's record and its victims under the lock.
//
// A child of fork() gets a new evictor of its own at its first request; the
// parent's is never touched there.
#pragma once

#include <memory>
#include <string>

#include "store/store_directory.hpp"
#include "util/unique_fd.hpp"
#include "unicache/store.hpp"

namespace unicache::detail {

// The thread's name (/proc/<pid>/task/<tid>/comm), at most 15 characters.
inline constexpr char kBackgroundThreadName[] = "unicache-store";

class background_evictor {
 public:
  // This process's evictor, made at the first call.
  static background_evictor& instance();
  // This process's evictor if it has one, else nullptr.
  static background_evictor* existing();

  // Asks for `shard` of `directory` to be cleaned with `config`, never
  // removing `keep` (an entry the requesting put reported as stored, or
  // ""); with `walk`, walked even if it needs no cleaning (its record is an
  // estimate). Never blocks on I/O; never throws.
  virtual void request(const std::shared_ptr<store_directory>& directory, const store_config& config, int shard,
                       std::string keep, bool walk = false) noexcept = 0;
  // Drops the requests for `directory` and waits until a cleanup of it in
  // progress stops (after its current batch).
  virtual void forget(const store_directory* directory) noexcept = 0;
  // Waits until nothing is requested or running.
  virtual void wait_idle() noexcept = 0;

  // Records that the entry open as `file` was just used (its mtime set to
  // now), on the thread, soon. A metadata write waits for the filesystem's
  // journal, for tens of milliseconds while another process removes
  // thousands of files: a get hands it over and returns. At most 64 wait;
  // beyond that a use is dropped (the next get of that entry records it).
  // Never blocks on I/O; never throws.
  virtual void record_use(unique_fd file) noexcept = 0;

 protected:
  ~background_evictor() = default;
};

}  // namespace unicache::detail
