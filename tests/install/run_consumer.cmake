# Installs flashrec into a scratch prefix, then builds and runs an outside project that
# finds it with find_package(flashrec) and links flashrec::flashrec.
file(REMOVE_RECURSE ${WORK_DIR})
function(run)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  message("${out}${err}")
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "failed (${rc}): ${ARGN}")
  endif()
  set(last_output "${out}" PARENT_SCOPE)
endfunction()
run(${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${WORK_DIR}/prefix)
run(${CMAKE_COMMAND} -S ${SOURCE_DIR}/tests/install/consumer -B ${WORK_DIR}/build
    -DCMAKE_PREFIX_PATH=${WORK_DIR}/prefix)
run(${CMAKE_COMMAND} --build ${WORK_DIR}/build)
# 3 steps of w -= 0.1 * (0.5 + 0.5): 1 - 0.3 = 0.7
run(${SOURCE_DIR}/tools/fr-run --timeout 60
    --expect "consumer: flashrec [0-9.]+ linked, 2 ranks, 3 steps, weights.0.=0.7, state [0-9a-f]{16}"
    -- ${SOURCE_DIR}/tools/fr-mpirun -n 2 ${WORK_DIR}/build/consumer
       --config ${SOURCE_DIR}/tests/install/consumer/train.yaml)
