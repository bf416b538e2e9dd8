#pragma once
// Programmatic dependent launch (griddepcontrol). Both are no-ops without the launch attribute.

#include "sm120_arch.cuh"

namespace sm120 {

// Wait until the preceding grid's memory operations are visible (before reading its outputs).
SM120_DEVICE void pdl_wait_primary() { asm volatile("griddepcontrol.wait;\n" ::: "memory"); }

// Allow the next grid in the stream to begin launching (its prologue overlaps our tail).
SM120_DEVICE void pdl_launch_dependents() { asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory"); }

}  // namespace sm120
