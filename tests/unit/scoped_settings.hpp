// Process-wide settings changed for one scope of a test, then restored.
#pragma once

#include "unicache/config.hpp"

namespace unicache::testing {

template <typename Mode, Mode (*current)(), void (*set)(Mode)>
class scoped_setting {
 public:
  explicit scoped_setting(Mode mode) : saved_(current()) { set(mode); }
  ~scoped_setting() { set(saved_); }
  scoped_setting(const scoped_setting&) = delete;
  scoped_setting& operator=(const scoped_setting&) = delete;

 private:
  Mode saved_;
};

using scoped_kernel_shapes = scoped_setting<kernel_shapes, &current_kernel_shapes, &set_kernel_shapes>;
using scoped_constant_check = scoped_setting<constant_check, &current_constant_check, &set_constant_check>;

// Specialization settings changed by `edit` for a scope, then restored.
class scoped_specialize_settings {
 public:
  template <typename Edit>
  explicit scoped_specialize_settings(Edit edit) : saved_(current_specialize_settings()) {
    specialize_settings s = saved_;
    edit(s);
    set_specialize_settings(s);
  }
  ~scoped_specialize_settings() { set_specialize_settings(saved_); }
  scoped_specialize_settings(const scoped_specialize_settings&) = delete;
  scoped_specialize_settings& operator=(const scoped_specialize_settings&) = delete;

 private:
  specialize_settings saved_;
};

// No background specialization (specialize_settings::threads = 0) for a
// scope: for tests that count the kernel path's builds and stored binaries
// exactly, which a class turning hot would add to.
struct scoped_no_specialization : scoped_specialize_settings {
  scoped_no_specialization() : scoped_specialize_settings([](specialize_settings& s) { s.threads = 0; }) {}
};

// Every shape class hot at its first execution (threshold 0), built by a
// background thread (at least one, whatever the caller's fixture set), for a
// scope: for tests of what a specialized kernel does.
struct scoped_eager_specialization : scoped_specialize_settings {
  scoped_eager_specialization()
      : scoped_specialize_settings([](specialize_settings& s) {
          s.threshold = 0;
          if (s.threads == 0) s.threads = 1;
        }) {}
};

}  // namespace unicache::testing
