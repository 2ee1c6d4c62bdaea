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

// No background specialization (specialize_settings::threads = 0) for a
// scope: for tests that count the kernel path's builds and stored binaries
// exactly, which a class turning hot would add to.
class scoped_no_specialization {
 public:
  scoped_no_specialization() : saved_(current_specialize_settings()) {
    specialize_settings s = saved_;
    s.threads = 0;
    set_specialize_settings(s);
  }
  ~scoped_no_specialization() { set_specialize_settings(saved_); }
  scoped_no_specialization(const scoped_no_specialization&) = delete;
  scoped_no_specialization& operator=(const scoped_no_specialization&) = delete;

 private:
  specialize_settings saved_;
};

// Every shape class hot at its first execution (threshold 0), built by a
// background thread (at least one, whatever the caller's fixture set), for a
// scope: for tests of what a specialized kernel does.
class scoped_eager_specialization {
 public:
  scoped_eager_specialization() : saved_(current_specialize_settings()) {
    specialize_settings s = saved_;
    s.threshold = 0;
    if (s.threads == 0) s.threads = 1;
    set_specialize_settings(s);
  }
  ~scoped_eager_specialization() { set_specialize_settings(saved_); }
  scoped_eager_specialization(const scoped_eager_specialization&) = delete;
  scoped_eager_specialization& operator=(const scoped_eager_specialization&) = delete;

 private:
  specialize_settings saved_;
};

}  // namespace unicache::testing
