// unicache/tiers.hpp — the old name of unicache/specialization.hpp (adaptive
// kernels were called tiered kernels). Deprecated: include
// unicache/specialization.hpp.
#pragma once

#include "unicache/specialization.hpp"
