include(CMakePackageConfigHelpers)
install(TARGETS flashrec EXPORT flashrecTargets
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
# Only the public headers (include/flashrec/): the API a trainer includes, its value types and
# the errors it may catch. The modules' own include/ folders are internal and never installed.
list(TRANSFORM FLASHREC_PUBLIC_HEADERS PREPEND ${PROJECT_SOURCE_DIR}/include/flashrec/
     OUTPUT_VARIABLE _flashrec_public_header_paths)
install(FILES ${_flashrec_public_header_paths} DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/flashrec)
# Built with CUDA: the GPU API a trainer uses beside it (docs/gpu.md, "Using it from a trainer"):
# typed CUDA/NCCL errors and their check macros, choosing the device, RAII streams and events.
# The other gpu/ headers are the runtime's own and stay internal.
set(FLASHREC_GPU_API_HEADERS cuda_check.hpp device.hpp handles.hpp)
if(FLASHREC_WITH_CUDA)
  list(TRANSFORM FLASHREC_GPU_API_HEADERS PREPEND ${PROJECT_SOURCE_DIR}/gpu/include/flashrec/gpu/
       OUTPUT_VARIABLE _flashrec_gpu_header_paths)
  install(FILES ${_flashrec_gpu_header_paths} DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/flashrec/gpu)
  if(FLASHREC_NCCL_ROOT)  # the pinned NCCL's header (cuda_check.hpp includes it)
    install(FILES ${FLASHREC_NCCL_INCLUDE}/nccl.h DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/flashrec/nccl)
  endif()
endif()

# The MPI this build used, with symlinks resolved: the installed package names it, not the
# source tree's .deps link.
file(REAL_PATH "${MPI_HOME}" FLASHREC_MPI_HOME)
# The installed mpirun wrapper: tools/fr-mpirun (the one place that holds mpirun's flags) with
# its default MPI prefix set to the build's. flashrec-launch finds it beside itself.
file(READ ${PROJECT_SOURCE_DIR}/tools/fr-mpirun _flashrec_wrapper)
string(REGEX REPLACE "\ndefault_prefix=[^\n]*\n" "\ndefault_prefix='${FLASHREC_MPI_HOME}'\n"
       _flashrec_installed_wrapper "${_flashrec_wrapper}")
if(_flashrec_installed_wrapper STREQUAL _flashrec_wrapper)
  message(FATAL_ERROR "flashrec: tools/fr-mpirun has no 'default_prefix=' line to set on install")
endif()
set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/tools/fr-mpirun)
file(WRITE ${CMAKE_CURRENT_BINARY_DIR}/install/fr-mpirun "${_flashrec_installed_wrapper}")
install(PROGRAMS ${CMAKE_CURRENT_BINARY_DIR}/install/fr-mpirun DESTINATION ${CMAKE_INSTALL_BINDIR})
# MPI_Allreduce's algorithm by size over shm: the wrapper reads it from <prefix>/share/flashrec.
install(FILES ${PROJECT_SOURCE_DIR}/tools/coll-rules-shm.conf DESTINATION share/flashrec)

install(EXPORT flashrecTargets NAMESPACE flashrec:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/flashrec)
configure_package_config_file(cmake/flashrecConfig.cmake.in
  ${CMAKE_CURRENT_BINARY_DIR}/flashrecConfig.cmake
  INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/flashrec
  PATH_VARS CMAKE_INSTALL_BINDIR)
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/flashrecConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/flashrecConfig.cmake
              ${CMAKE_CURRENT_BINARY_DIR}/flashrecConfigVersion.cmake
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/flashrec)

# Slurm: the sbatch templates and the epilog that removes a job's /dev/shm segments where no
# flashrec process was left to (docs/slurm.md, "Cleaning up /dev/shm").
install(PROGRAMS ${PROJECT_SOURCE_DIR}/slurm/epilog/flashrec-epilog DESTINATION ${CMAKE_INSTALL_DATADIR}/flashrec/slurm)
install(FILES ${PROJECT_SOURCE_DIR}/slurm/templates/flashrec.sbatch ${PROJECT_SOURCE_DIR}/slurm/templates/flashrec-cuda.sbatch
        DESTINATION ${CMAKE_INSTALL_DATADIR}/flashrec/slurm)
