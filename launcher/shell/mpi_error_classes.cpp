// The core names ULFM's error classes by number (core/classification.hpp) so that it reads no MPI
// header; this file, built with the shell, checks the numbers against the MPI it runs with.
#include <mpi.h>
#include <mpi-ext.h>

#include "classification.hpp"

static_assert(flashrec::launcher::kMpiErrProcFailed == MPIX_ERR_PROC_FAILED);
static_assert(flashrec::launcher::kMpiErrProcFailedPending == MPIX_ERR_PROC_FAILED_PENDING);
static_assert(flashrec::launcher::kMpiErrRevoked == MPIX_ERR_REVOKED);
