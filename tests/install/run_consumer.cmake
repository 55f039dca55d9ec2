# Installs flashrec into a scratch prefix, copies an outside trainer project out of the source
# tree, builds it with find_package(flashrec), and runs it with the *installed* tools only:
# bin/fr-mpirun, then bin/flashrec-launch twice (no failure; a rank SIGKILLed in step 3), whose
# final_checksum= lines must be identical.
file(REMOVE_RECURSE ${WORK_DIR})
function(run)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err
                  WORKING_DIRECTORY ${WORK_DIR})
  message("${out}${err}")
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "failed (${rc}): ${ARGN}")
  endif()
  set(last_output "${out}${err}" PARENT_SCOPE)
endfunction()
function(checksum_of output var)
  string(REGEX MATCHALL "final_checksum=[0-9a-f]+" sums "${output}")
  list(LENGTH sums n)
  if(NOT n EQUAL 1)
    message(FATAL_ERROR "expected exactly one final_checksum= line, found ${n}")
  endif()
  set(${var} "${sums}" PARENT_SCOPE)
endfunction()

set(prefix ${WORK_DIR}/prefix)
file(MAKE_DIRECTORY ${WORK_DIR})
run(${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${prefix})
# What a Slurm site installs from the prefix: the epilog (runnable) and the sbatch templates.
if(NOT EXISTS ${prefix}/share/flashrec/coll-rules-shm.conf)
  message(FATAL_ERROR "share/flashrec/coll-rules-shm.conf (the installed fr-mpirun's shm rules) was not installed")
endif()
foreach(f flashrec-epilog flashrec.sbatch flashrec-cuda.sbatch)
  if(NOT EXISTS ${prefix}/share/flashrec/slurm/${f})
    message(FATAL_ERROR "share/flashrec/slurm/${f} was not installed")
  endif()
endforeach()
run(env SLURM_JOB_ID=4294967294 SLURM_JOB_UID=0 ${prefix}/share/flashrec/slurm/flashrec-epilog)
file(COPY ${SOURCE_DIR}/tests/install/consumer/ DESTINATION ${WORK_DIR}/src)
run(${CMAKE_COMMAND} -S ${WORK_DIR}/src -B ${WORK_DIR}/build -DCMAKE_PREFIX_PATH=${prefix})
# The package names its tools (flashrecConfig.cmake: FLASHREC_LAUNCH, FLASHREC_MPIRUN): the installed ones.
if(NOT last_output MATCHES "flashrec tools: launch=([^ ]+) mpirun=([^ ]+) mpi=([^\n]+)")
  message(FATAL_ERROR "the consumer's configure did not report the package's tools")
endif()
set(launch ${CMAKE_MATCH_1})
set(mpirun ${CMAKE_MATCH_2})
if(NOT launch STREQUAL "${prefix}/bin/flashrec-launch" OR NOT mpirun STREQUAL "${prefix}/bin/fr-mpirun")
  message(FATAL_ERROR "the package names ${launch} and ${mpirun}, not the installed tools in ${prefix}/bin")
endif()
set(configure_output "${last_output}")
run(${CMAKE_COMMAND} --build ${WORK_DIR}/build)

# Built with CUDA: the GPU API is installed and usable from outside (no GPU needed: without one
# choosing a device is a typed error).
if(WITH_CUDA)
  if(NOT configure_output MATCHES "flashrec GPU API: installed")
    message(FATAL_ERROR "flashrec was built with CUDA but the package does not offer the GPU API")
  endif()
  run(${WORK_DIR}/build/consumer_gpu)
  if(NOT last_output MATCHES "consumer_gpu: flashrec [0-9.]+, [0-9]+ CUDA device")
    message(FATAL_ERROR "consumer_gpu did not run as expected")
  endif()
endif()

# Nothing from the source tree or the build tree may be needed: no FLASHREC_MPIRUN override.
set(env ${CMAKE_COMMAND} -E env --unset=FLASHREC_MPIRUN --unset=FLASHREC_MPI_PREFIX)
set(harness ${SOURCE_DIR}/tools/fr-run --timeout 120)  # the test harness: timeout and reaping

# The installed tools start at all (RPATH), and the launcher picks the installed wrapper.
run(${env} ${prefix}/bin/flashrec-snapshots remove install-consumer-none)
run(${env} ${launch} --version)
run(${env} ${launch} ${WORK_DIR}/src/train.yaml --dry-run)
string(FIND "${last_output}" "${prefix}/bin/fr-mpirun -n 3 ${WORK_DIR}/build/consumer" at)
if(at EQUAL -1)
  message(FATAL_ERROR "the installed flashrec-launch does not run the installed ${prefix}/bin/fr-mpirun")
endif()

# 6 steps of w -= 0.1 * (0.5 + 0.5): 1 - 0.6 = 0.4
run(${env} ${harness} --expect "consumer: flashrec [0-9.]+ linked, 2 ranks, 6 steps, weights.0.=0.4, state [0-9a-f]{16}"
    -- ${mpirun} -n 3 ${WORK_DIR}/build/consumer --config ${WORK_DIR}/src/train.yaml)
checksum_of("${last_output}" direct)

run(${env} ${harness} --expect "flashrec-launch: job install-consumer: finished, [0-9]+/6 steps"
    -- ${launch} ${WORK_DIR}/src/train.yaml --events ${WORK_DIR}/clean.events.jsonl)
checksum_of("${last_output}" clean)
run(${env} ${harness} --expect "flashrec-launch: job install-consumer: finished, [0-9]+/6 steps"
    --expect "failures +1" --expect "#1 dp1.*at step 3: "
    -- ${launch} ${WORK_DIR}/src/train.yaml --events ${WORK_DIR}/killed.events.jsonl
       --fault role=1:step=3:phase=allreduce:action=kill)
checksum_of("${last_output}" faulted)
message("fr-mpirun: ${direct}; flashrec-launch: ${clean}; with a rank killed in step 3: ${faulted}")
if(NOT clean STREQUAL faulted OR NOT clean STREQUAL direct)
  message(FATAL_ERROR "final checksums differ: ${direct} / ${clean} / ${faulted}")
endif()
