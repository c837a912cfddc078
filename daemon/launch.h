// The launch description of a kernel config (protocol v2, client/launch.h): every argument in
// order with its kind, dtype, element count and bytes for the asked shape, the scalar values, how
// each workspace must be zeroed, the launch geometry, the arch and the cubin id. Built from the
// Instance a template makes for a problem (templates/space.h), which already holds every value.
// Used by v2 lookups and by the kernel op, so both describe a config identically.
// Thread-safety: pure functions.
#pragma once

#include <string>

#include "client/launch.h"
#include "templates/space.h"

namespace ktune {

// REQUIRES: `arch` is target_arch() of the instance's template for the device; `cubin_id` is
// Compiler::cubin_id() of the same config and arch.
protocol::LaunchDescription describe_launch(const Instance& instance, const std::string& arch,
                                            const std::string& cubin_id);

// The same for an instance of `tmpl` compiled for `arch`, computing the cubin id.
protocol::LaunchDescription describe_launch(const KernelTemplate& tmpl, const Instance& instance,
                                            const std::string& arch);

}  // namespace ktune
