# Test helpers. Labels in use: unit ulfm ft soak slurm gpu install.
find_package(doctest REQUIRED)

# flashrec_unit_test(<source>...): one doctest executable per file, label `unit`.
function(flashrec_unit_tests)
  foreach(src ${ARGN})
    get_filename_component(name ${src} NAME_WE)
    add_executable(${name} ${src})
    target_link_libraries(${name} PRIVATE flashrec_internal doctest::doctest)
    add_test(NAME unit.${name} COMMAND ${name})
    set_tests_properties(unit.${name} PROPERTIES LABELS unit TIMEOUT 120)
  endforeach()
endfunction()

# The fr-run arguments for EXPECT / REJECT / EXIT_CODE, into ${out}.
function(_flashrec_checks out)
  cmake_parse_arguments(C "" "EXIT_CODE" "EXPECT;REJECT" ${ARGN})
  set(checks)
  foreach(rx ${C_EXPECT})
    list(APPEND checks --expect ${rx})
  endforeach()
  foreach(rx ${C_REJECT})
    list(APPEND checks --reject ${rx})
  endforeach()
  if(DEFINED C_EXIT_CODE)
    list(APPEND checks --exit-code ${C_EXIT_CODE})
  endif()
  set(${out} ${checks} PARENT_SCOPE)
endfunction()

# flashrec_mpi_test(<name> NP <n> COMMAND <exe> [args...] [EXPECT <regex>...] [REJECT <regex>...]
#                   [TIMEOUT <s>] [LABELS <label>...])
# Runs under tools/fr-run (hard timeout, reaps every process, fails on leftovers) and
# tools/fr-mpirun (the one place that holds mpirun's flags). Judged by output, not exit code.
function(flashrec_mpi_test name)
  cmake_parse_arguments(T "" "NP;TIMEOUT" "COMMAND;EXPECT;REJECT;LABELS" ${ARGN})
  if(NOT T_TIMEOUT)
    set(T_TIMEOUT 120)
  endif()
  # Any rank that says FAIL fails the test, whatever mpirun returns.
  _flashrec_checks(checks EXPECT ${T_EXPECT} REJECT ${T_REJECT} "^FAIL")
  add_test(NAME ${name}
           COMMAND ${FLASHREC_RUN} --timeout ${T_TIMEOUT} ${checks} --
                   ${FLASHREC_MPIRUN} -n ${T_NP} ${T_COMMAND})
  math(EXPR hard_limit "${T_TIMEOUT} + 30")
  set_tests_properties(${name} PROPERTIES LABELS "${T_LABELS}" TIMEOUT ${hard_limit})
endfunction()

# flashrec_cmd_test(<name> COMMAND ... [EXPECT ...] [REJECT ...] [TIMEOUT s] [EXIT_CODE n] [LABELS ...])
# Same harness for a command that is not itself an mpirun (the launcher, scripts).
function(flashrec_cmd_test name)
  cmake_parse_arguments(T "" "TIMEOUT;EXIT_CODE" "COMMAND;EXPECT;REJECT;LABELS" ${ARGN})
  if(NOT T_TIMEOUT)
    set(T_TIMEOUT 120)
  endif()
  set(exit_code)
  if(DEFINED T_EXIT_CODE)
    set(exit_code EXIT_CODE ${T_EXIT_CODE})
  endif()
  _flashrec_checks(checks EXPECT ${T_EXPECT} REJECT ${T_REJECT} ${exit_code})
  add_test(NAME ${name} COMMAND ${FLASHREC_RUN} --timeout ${T_TIMEOUT} ${checks} -- ${T_COMMAND})
  math(EXPR hard_limit "${T_TIMEOUT} + 30")
  set_tests_properties(${name} PROPERTIES LABELS "${T_LABELS}" TIMEOUT ${hard_limit})
endfunction()
