// flashrec: the one header a trainer includes.
#pragma once
#include <mpi.h>

#include "flashrec/errors.hpp"

namespace flashrec {

// The library's version, "major.minor.patch".
const char* version();

}  // namespace flashrec
