// Process-wide settings changed for one scope of a test, then restored.
#pragma once

#include "unicache/config.hpp"

namespace unicache::testing {

// Sets the process's kernel_shapes mode for a scope, and restores it.
class scoped_kernel_shapes {
 public:
  explicit scoped_kernel_shapes(kernel_shapes mode) : saved_(current_kernel_shapes()) { set_kernel_shapes(mode); }
  ~scoped_kernel_shapes() { set_kernel_shapes(saved_); }
  scoped_kernel_shapes(const scoped_kernel_shapes&) = delete;
  scoped_kernel_shapes& operator=(const scoped_kernel_shapes&) = delete;

 private:
  kernel_shapes saved_;
};

// Sets the process-wide constant check for a scope, and restores it.
class scoped_constant_check {
 public:
  explicit scoped_constant_check(constant_check mode) : saved_(current_constant_check()) { set_constant_check(mode); }
  ~scoped_constant_check() { set_constant_check(saved_); }
  scoped_constant_check(const scoped_constant_check&) = delete;
  scoped_constant_check& operator=(const scoped_constant_check&) = delete;

 private:
  constant_check saved_;
};

}  // namespace unicache::testing
