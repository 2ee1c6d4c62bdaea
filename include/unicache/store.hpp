// unicache/store.hpp — the persistent kernel store: compiled binaries on disk,
// shared by every process of a machine, safe across crashes and upgrades.
// For: users (settings, maintenance, blobs); backends reach the store through
// the kernel path (kernel_path.hpp), never directly.
//
// The kernel path (kernel_path.hpp) keeps every kernel a backend builds here,
// under the kernel's full key and the device's identity; the next process
// (or the same one, after its in-memory cache evicted the kernel) loads it
// instead of compiling. What a user does with the store:
//
//   auto& store = unicache::kernel_store::instance();   // configured from UNICACHE_PERSISTENT_CACHE_*
//   store.set_directory("/var/cache/my-service/unicache");
//   store.set_capacity_mb(2048);
//   store.set_remote("redis://cache.internal:6379?prefix=my-service");  // the remote tier, shared by a fleet
//   unicache::store_stats s = store.stats();                            // entries, bytes
//
// get(), put() and remove() take a device identity and a key directly: for
// tools, tests, and applications with binaries of their own.
//
// The device identity says what decides a binary (device_identity.hpp: the
// architecture, compiler and target for CUDA; device and driver for OpenCL),
// and the store adds unicache's own version and git hash: a library upgrade,
// or a driver upgrade where the driver decides the binary, never serves an
// old binary. Keys are compared in full on every hit;
// a hash collision never serves another key's binary.
//
// Failure is never the caller's problem: get() and put() do not throw. A
// corrupt, truncated or foreign entry is a miss (and is removed); an
// unwritable directory, a full disk or a permission error prints one warning
// and the process carries on without persistence.
//
// Untrusted contents: whatever another process left in the store is read
// with care. Nothing below the root is followed as a symbolic link (the
// configured directory itself may be reached through one); an entry is read
// only if it is a regular file no larger than the largest entry the store
// keeps, opened without blocking; a slot holding anything else (a FIFO, a
// directory, a link, an unreadable file) is skipped by get, put and remove
// alike, so put never reports as stored what get cannot read. verify()
// reports such things and verify(true) removes them.
//
// Trust: a stored binary is code the process will run, so the store loads
// nothing from a directory or entry that another user owns or could have
// written. Private (the default): the configured directory, its v1 root,
// every directory on the way to an entry, and the entry must be owned by
// this process's user or root and not be writable by group or others; the
// store creates directories 0700 and files 0600 (whatever the umask).
// Shared (store_config::shared, UNICACHE_PERSISTENT_CACHE_SHARED=1): the
// users of the directory's group trust each other; any owner is accepted
// but nothing may be writable by others; the store creates directories 02770
// (setgid: new ones keep the group) and files 0660. An untrusted root turns
// the store off with one warning; an untrusted entry or key directory is a
// miss (one warning per process).
//
// Thread and process safety: any number of threads and processes may use one
// store directory at once. Entries are published by rename and never
// modified, so a reader never sees a partial entry. The store is split into
// 16 shards by key hash; each shard's size record is updated under the
// shard's advisory flock(2) lock, which the kernel releases when a process
// dies, so a crash never leaves the store locked. Nothing blocks on a file
// another process planted while holding a lock. Gets take no lock (except to
// remove a damaged entry they found).
//
// Eviction never stalls a put: a put that finds its shard over its share of
// the limit (a sixteenth) asks this process's evictor thread to clean the
// shard and returns. The evictor walks that shard alone, without the lock,
// and removes least recently used entries in batches of at most 8 ms under
// the shard's lock, with a pause between batches, down to half the shard's
// share; a put into the shard waits for a batch, not for a walk. LRU order
// therefore holds within a shard, not across the store: the store as a
// whole holds up to its limit (each shard up to a sixteenth of it), and an
// entry can outlive an older one in another shard. The thread starts at the first eviction a process needs
// and stops at exit, after its current walk or batch.
//
// Keys that describe themselves: `unicache-store list` shows what each
// entry is. A key written with unicache::cache_key whose first field is a
// text naming its kind (1 to 64 bytes of letters, digits and . _ - + / :)
// is listed by that kind, and by its second field, if that is a text, as the
// name: the OpenCL backend's keys (cache_key "opencl-c", kernel name, build
// options, source) list as kind "opencl-c", name "gemm". Any other key
// (such as the OpenCL engine's "opencl-engine-info/1") is listed as a
// quoted, escaped preview of its first 40 bytes. Keys longer than 1 MiB are
// not stored.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "unicache/bytes.hpp"
#include "unicache/device_identity.hpp"
#include "unicache/error.hpp"
#include "unicache/storage_tier.hpp"

namespace unicache {

namespace detail {
struct store_access;
}

// Configuration of a store; see docs/configuration.md.
struct store_config {
  bool enabled = true;
  std::string directory;  // the root; empty means "not set" (the store is off)
  // The store's size, enforced per shard: a shard over a sixteenth of it is
  // cleaned down to half of that in the background (see above); a binary
  // whose entry alone is larger than a sixteenth is not stored.
  // 0: no size limit (as SYCL_CACHE_MAX_SIZE=0).
  std::uint64_t max_size_bytes = std::uint64_t{1024} << 20;
  std::uint32_t threshold_days = 30;  // entries unused this long are removed; 0: never
  std::uint64_t min_entry_bytes = 0;
  std::uint64_t max_entry_bytes = std::uint64_t{256} << 20;
  // false: puts never evict for size and max_size_bytes is not enforced
  // (as SYCL_CACHE_EVICTION_DISABLE); the store grows until threshold_days,
  // prune or clear removes entries. Age-based removal is not affected.
  bool size_eviction = true;
  // A store shared on purpose by the users of its directory's group; see
  // "Trust" above. false: private to this process's user.
  bool shared = false;

  // Defaults, then UNICACHE_PERSISTENT_CACHE, UNICACHE_PERSISTENT_CACHE_DIR
  // (default $XDG_CACHE_HOME/unicache, else $HOME/.cache/unicache),
  // ..._MAX_SIZE (MB; 0: no limit), ..._EVICTION (0 or 1), ..._THRESHOLD
  // (days), ..._MIN_ENTRY_SIZE and ..._MAX_ENTRY_SIZE (bytes) and ..._SHARED
  // (0 or 1). Malformed values: one warning each, default kept.
  static store_config from_environment();
};

struct store_stats {
  std::uint64_t entries = 0;
  std::uint64_t bytes = 0;           // bytes of entry files: recounted, or as recorded
  std::uint64_t recorded_bytes = 0;  // what the shards' size records say
  std::uint64_t devices = 0;
  std::uint64_t temporary_files = 0;  // left behind by writers that died (recounted only)
  bool recounted = false;             // whether the store, or a shard without a valid record, was walked
};

// One entry (or, from verify, anything else that does not belong in the
// store) as the maintenance tool sees it. Every string is printable ASCII:
// names and keys from disk are shown escaped, never raw.
struct store_entry_info {
  std::string path;  // the store's directory, then names (odd ones quoted and escaped)
  std::string device_hash;
  std::string device_description;  // as the writer recorded it (device.txt)
  std::string kind;                // what the key says it is ("opencl-c"), or "" (see above)
  std::string name;                // the kernel's name when the key gives one, or ""
  std::string key_preview;         // a key that does not describe itself: its first bytes, quoted
  std::uint64_t file_bytes = 0;
  std::uint64_t key_bytes = 0;
  std::uint64_t binary_bytes = 0;
  std::int64_t last_use_unix = 0;
  bool valid = false;
  std::string problem;  // why it is not valid
};

// Errors of the explicit (blob and maintenance) API; get/put never throw.
class store_error : public error {
 public:
  using error::error;
};

// Bundles: many entries of a store in one file, so that a warm store
// travels to another machine (filled by CI, imported on a fleet):
//
//   unicache::bundle_filter only_cuda;
//   only_cuda.kind = "cuda-c";
//   ci_store.export_bundle("kernels.ucbundle", only_cuda, "/etc/unicache/remote.key");
//   ...
//   unicache::bundle_report r = fleet_store.import_bundle("kernels.ucbundle", "/etc/unicache/remote.key");
//   for (const std::string& why : r.refused) std::fprintf(stderr, "%s\n", why.c_str());
//
// Each record of a bundle carries one entry in the store's own format (with
// its checksum), its device's identity hash and description, and with a
// secret an HMAC-SHA256 signature; a trailer closes the file. The format:
// docs/design.md, "Bundles".
//
// Secrets (a file as UNICACHE_REMOTE_CACHE_SECRET_FILE: a regular file of 16
// to 4096 bytes that others cannot write): export with one signs every
// record; import with one accepts only records signed with it (an unsigned
// or otherwise signed record is refused and reported). Import without one
// ignores signatures: a bundle is then trusted as much as files copied into
// the store would be. Use a secret for a bundle that crosses machines.

// Which entries export_bundle writes; an empty field selects everything.
struct bundle_filter {
  std::string kind;                // only keys of this kind, as list() reports it ("opencl-c", "cuda-c")
  std::string device;              // only devices whose description contains this text ("H200")
  std::uint32_t max_age_days = 0;  // only entries used within this many days; 0: any
};

// What an export or an import did. Every string is printable ASCII.
struct bundle_report {
  std::uint64_t records = 0;          // export: records written; import: records in the bundle
  std::uint64_t imported = 0;         // import: entries now stored that were not
  std::uint64_t already_present = 0;  // import: entries the store held already (left as they were)
  std::uint64_t bytes = 0;            // the bundle's size
  // One line per refused record (import: "record 17: entry corrupt
  // (checksum mismatch)", "record 3: signature does not verify", records
  // numbered from 1) or per entry export left out because it is damaged
  // ("<path>: corrupt (checksum mismatch)").
  std::vector<std::string> refused;
};

// --- Misses that explain themselves.
//
// A warm store that misses costs a build, and the reason is usually a key
// field: another GPU architecture, another compiler or unicache version,
// other options or another shape class. With UNICACHE_EXPLAIN_MISSES=1 (or
// set_explain_misses(true)), the kernel path prints one line on stderr for
// a kernel it builds while other entries of the same kernel are stored,
// naming the fields in which the nearest one differs:
//
//   unicache: miss explained: cuda-c gemm (3f0c9a1b2d4e5f60): the nearest stored entry
//     (9a8b7c6d5e4f3a2b) differs in architecture (stored sm_80, here sm_90)
//
// and, always, one for a stored binary this machine refused before loading
// it (kernel_builder::load_refusal: a driver too old for the compiler that
// made it; the kernel is built here, and the stored binary stays). Bounded: once per kernel and set of differing fields, at most
// 256 lines a process. kernel_store::explain_miss gives the same to a tool.
struct miss_explanation {
  std::string what;             // the kernel: "cuda-c gemm" (its key's language and name, printable)
  std::string blob_id;          // the missed (device, key), as blob_id() gives it
  std::string nearest_blob_id;  // the nearest stored entry of the same kernel
  // The fields that differ, each "name (stored X, here Y)", in this order:
  // backend, the identity's fields (CUDA: architecture, target, compiler;
  // other backends: device, device version, driver), unicache version,
  // options, shape class, then "generated source" (the same fields, another
  // kernel configuration or generator) or "key format" (an entry an older
  // unicache wrote). Values are printable and cut at 48 bytes.
  std::vector<std::string> differences;
  // Set instead when a stored binary was refused at load: why.
  std::string refusal;
  // The line the kernel path prints.
  std::string line() const;
};

// Whether the kernel path explains its misses (UNICACHE_EXPLAIN_MISSES, 0 or
// 1, default 0). Safe from any thread; applies to misses after the call.
void set_explain_misses(bool on) noexcept;
bool explain_misses() noexcept;

class kernel_store {
 public:
  // Opens (creating if needed) the store in config.directory. Never throws:
  // if the directory cannot be used, one warning is printed and the store is
  // disabled (get misses, put does nothing).
  explicit kernel_store(store_config config);
  ~kernel_store();
  kernel_store(const kernel_store&) = delete;
  kernel_store& operator=(const kernel_store&) = delete;

  // The process-wide store, configured from the environment on first use
  // and by the setters below; never destroyed (usable from static
  // destructors).
  static kernel_store& instance();

  // Runtime configuration, mirroring the environment variables. A change
  // applies to every operation that starts after the call returns;
  // operations already running finish with the settings they started with.
  // Safe to call while other threads use the store. A new directory (or
  // enabling) is opened as the constructor opens one: when it cannot be used
  // or is not trusted, one warning and the store stays off.
  // set_capacity_mb throws store_error, changing nothing, above the largest
  // MB value whose bytes fit in 64 bits (the bound the variable has).
  void set_enabled(bool enabled);                  // UNICACHE_PERSISTENT_CACHE
  void set_directory(std::string directory);       // UNICACHE_PERSISTENT_CACHE_DIR
  void set_capacity_mb(std::uint64_t capacity_mb); // UNICACHE_PERSISTENT_CACHE_MAX_SIZE; 0: no limit
  void set_size_eviction(bool enabled);            // UNICACHE_PERSISTENT_CACHE_EVICTION

  // The binary stored under `key` for `device`, or nullopt. Records the use
  // (at most once a minute per entry) on the store's background thread: a
  // get writes nothing itself, so it never waits for the filesystem's
  // journal. Never throws.
  std::optional<byte_vector> get(const device_identity& device, std::string_view key) noexcept;

  // Stores `binary` under `key` for `device`. If its shard is then over its
  // share of the size, the shard is cleaned in the background (least
  // recently used first, down to half its share; never the entry just
  // stored). Returns whether the binary is now stored where get finds it
  // (false: disabled, outside the entry size limits, larger than a
  // sixteenth of the store, a key over 1 MiB, no usable slot for the key,
  // or a write failed). Never throws.
  bool put(const device_identity& device, std::string_view key, byte_span binary) noexcept;
  // get() for a caller that builds the binary when it is missing (the
  // kernel path does). On a miss in every tier, it asks the remote tier for
  // a build lease on (device, key), so that the processes of a fleet that
  // miss at once build it once (remote.hpp, "lease"):
  //   - `binary` set: found, or built by the process that held the lease
  //     while this one waited (for at most the lease it found and the
  //     next holder's build, never more than twice the lease's ttl; then
  //     it builds);
  //   - otherwise the caller builds it. With `leased`, this process holds
  //     the lease: put() releases it once the value is on its way, and a
  //     caller whose build failed calls release_lease().
  // Without a remote tier, with leases off, the tier failing or its breaker
  // open, it is get() and nobody waits. Never throws.
  struct lookup {
    std::optional<byte_vector> binary;
    bool leased = false;
  };
  lookup get_or_lease(const device_identity& device, std::string_view key) noexcept;
  // Ends this process's lease on (device, key) without a value (a failed
  // build): the next process that asks builds it. Never throws.
  void release_lease(const device_identity& device, std::string_view key) noexcept;

  // Removes the binary stored under `key` for `device` (a backend calls it
  // when the driver rejects a stored binary, before storing a rebuilt one).
  // Returns whether an entry was removed. Never throws.
  bool remove(const device_identity& device, std::string_view key) noexcept;

  // The remote tiers (unicache/remote.hpp): `url` as UNICACHE_REMOTE_CACHE,
  // one URL or up to 4 separated by spaces, nearest first ("" turns them
  // off); `secret_file` as UNICACHE_REMOTE_CACHE_SECRET_FILE ("" for
  // unsigned values). get then asks the remote tiers in order on a local
  // miss and writes a hit to the tiers before the one that had it; put and
  // remove also go to every remote tier, in the background (never in
  // read-only mode); the nearest grants build leases (get_or_lease). A
  // URL's scheme must be registered (redis://: register_redis_tiers, the
  // remote component's). Throws invalid_argument for a malformed URL, an
  // unregistered scheme or an unusable secret file, and
  // remote_error when a tier's writer thread cannot start, changing
  // nothing; the message never quotes a password or the secret.
  void set_remote(const std::string& url, const std::string& secret_file = "");
  // What the remote tiers did in this process, one entry each, nearest
  // first (none when there is no remote tier).
  std::vector<remote_stats> tier_stats() const;
  // The same, added up: the counters summed, `tier` and `url` the tiers'
  // joined by spaces (all zero when there is none).
  remote_stats remote_tier_stats() const;
  // Waits until the remote tiers' queued writes are done.
  void flush_remote();

  // Waits until this process's background thread has finished the
  // cleanups its puts asked for and recorded the uses its gets handed over
  // (of every store in the process). For programs that fill a store and
  // exit, tests and benchmarks; gets and puts never need it.
  void finish_eviction() const;

  // Whether get/put can use the disk at all, and whether writes still work
  // (a write failure turns writes off for the rest of the process).
  bool enabled() const noexcept;
  bool writable() const noexcept;
  // The settings operations that start now use.
  store_config config() const;

  // Maintenance (the unicache-store tool); each throws store_error if the
  // store is disabled. Apart from stats without `recount`, they walk the
  // whole store (never following a link; about 10 µs per entry).
  //
  // stats: by default from the shards' size records (milliseconds at any
  // size); a shard whose record is missing or damaged makes it walk. With
  // `recount`, walks and counts what is on disk (temporary files included)
  // beside what the records say.
  store_stats stats(bool recount = false) const;
  // Every entry, with what its key says it is; reads each device's
  // description once.
  std::vector<store_entry_info> list() const;
  // Checks every entry, and reports anything else that does not belong
  // (directories, FIFOs, links or files where the store keeps entries or
  // its own directories). With `fix`, removes them (a link, never what it
  // points to), temporary files left by dead writers and empty key
  // directories, and rewrites the shards' size records. Returns what was bad.
  std::vector<store_entry_info> verify(bool fix) const;
  // Removes least recently used entries (across all shards) until at most
  // `max_bytes` remain, and entries unused for more than `max_age_days` (0:
  // no age limit), in batches under each shard's lock; then recounts every
  // shard. Returns the number of entries removed.
  std::uint64_t prune(std::uint64_t max_bytes, std::uint32_t max_age_days) const;
  // Removes every entry of every device.
  void clear() const;

  // Bundles (see above). Both throw store_error, with what to do, when the
  // store is disabled, and invalid_argument for an unusable secret file.
  //
  // export_bundle writes the entries `filter` selects to `path`: to a new
  // temporary file beside it, renamed to `path` once complete (replacing
  // what was there: a file, or a link itself, never what it points to), so
  // that `path` never holds a partial bundle. Walks the store without a
  // lock, as list() does; a damaged entry is left out and reported. Throws
  // store_error when `path` cannot be written (its directory is missing or
  // not writable, it is a directory, the disk is full); nothing is left
  // behind then.
  bundle_report export_bundle(const std::string& path, const bundle_filter& filter,
                              const std::string& secret_file = "") const;
  // import_bundle stores the entries of the bundle at `path`, each checked
  // as the store checks what it reads (its checksum, its device, this
  // store's size limits) and published as put publishes (under its shard's
  // lock, with this store's trust and permissions, counted in its shard's
  // record, evicting as put does), so other threads and processes may use
  // the store meanwhile. A new device directory gets the record's
  // description as its device.txt. A refused record is reported and the
  // others imported. `path` is opened without following a link or
  // blocking, and must be a regular file. Throws store_error, importing
  // nothing, when it is not one, is not a bundle, is of another bundle
  // format version, or is truncated or damaged (its trailer or a record's
  // header); and when the store is not writable or stops being writable
  // (the message says how many entries were imported by then).
  bundle_report import_bundle(const std::string& path, const std::string& secret_file = "");

  // Why (device, key) misses: compared with the nearest entry of the same
  // kernel (its name, on any backend) in the local store, field
  // by field (see miss_explanation). nullopt when no entry of that kernel
  // is stored, the store is off, or the key is not a kernel's. Reads the
  // header and key of every entry (at most 100,000; about 10 µs each), so
  // the kernel path asks only when explain_misses() is on, once per miss.
  // Never throws.
  std::optional<miss_explanation> explain_miss(const device_identity& device, std::string_view key) const noexcept;
  // Records a miss of (device, key) in the store, so that it can be
  // explained again offline (`unicache-store explain ID`): the kernel path
  // records each miss it explains. At most 64 records are kept (the oldest
  // go), under the store's directory, with the store's permissions; not
  // entries (stats and list do not count them). Never throws; does nothing
  // when the store is off or not writable.
  void record_miss(const device_identity& device, std::string_view key) noexcept;
  // The explanation, against the store as it is now, of a recorded miss,
  // by its blob id or a prefix of it of 8 or more hex digits (the
  // explanation line shows 16). Without an entry of its kernel stored now,
  // the explanation's nearest_blob_id is empty. nullopt: no record has that
  // id. Throws store_error: the store is off, the id is not hex, it names
  // several records, or the record is damaged or not trusted.
  std::optional<miss_explanation> explain_recorded_miss(std::string_view id) const;

 private:
  friend struct detail::store_access;
  struct impl;
  impl* impl_;
};

// --- Blob API: for applications with their own storage.

// A stable identifier of (device, key): 32 lowercase hex digits, the same in
// every process and on every machine with the same identity and unicache build.
std::string blob_id(const device_identity& device, std::string_view key);

// The self-checking serialized form of one entry (the same format as the
// store's files: magic, format version, device identity hash, sizes, checksum).
byte_vector serialize_blob(const device_identity& device, std::string_view key, byte_span binary);

struct blob_contents {
  std::string key;
  byte_vector binary;
};
// Parses a blob made by serialize_blob for `device`. Throws store_error with
// a message naming the problem: not a unicache blob, another format version,
// another device or unicache build, truncated, or corrupt.
blob_contents deserialize_blob(const device_identity& device, byte_span blob);

}  // namespace unicache
