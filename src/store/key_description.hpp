// How a stored key describes itself to the maintenance tool (`list`).
//
// A key written with unicache::cache_key whose first field is a text naming
// its kind (1 to 64 bytes of letters, digits and . _ - + / :) describes
// itself: the kind is shown as it is, and a second text field, if there is
// one, is shown as the name (the OpenCL backend's keys are "opencl-c",
// kernel name, build options, source: kind "opencl-c", name "gemm"). Any
// other key is shown as a preview: its first bytes, quoted and escaped.
// Keys are untrusted bytes from disk: everything here is printable ASCII.
#pragma once

#include <string>
#include <string_view>

namespace unicache::detail {

struct key_description {
  std::string kind;     // "" when the key does not describe itself
  std::string name;     // escaped as printable() does; "" when there is none
  std::string preview;  // keys that do not describe themselves: quoted() of their first bytes
};

key_description describe_key(std::string_view key);

}  // namespace unicache::detail
