// include/uapi/farpass.h for C++: its struct farpass_irq_bridge ends in a C flexible array member,
// which C++ has only as a GCC/Clang extension (-Wpedantic would refuse it).
#pragma once

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wpedantic"
#include <uapi/farpass.h>
#pragma GCC diagnostic pop
