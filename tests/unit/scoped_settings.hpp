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

}  // namespace unicache::testing
