# flashrec_module(<name> SOURCES ...): an object library for one module, with our warnings.
add_library(flashrec_warnings INTERFACE)
target_compile_options(flashrec_warnings INTERFACE
  $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wpedantic -Wshadow -Wconversion -Wno-sign-conversion>
  $<$<AND:$<COMPILE_LANGUAGE:CXX>,$<BOOL:${FLASHREC_WERROR}>>:-Werror>)

function(flashrec_module name)
  # USES: the modules whose headers this one includes (dependencies point one way:
  # runtime -> {ft, spares, slurm}; spares -> ft). A module's include/ holds its internal
  # headers, seen only by the modules that use it and by in-tree tests (flashrec_internal);
  # the public ones are in the top-level include/.
  cmake_parse_arguments(M "" "" "SOURCES;USES;PUBLIC_DEPS;PRIVATE_DEPS" ${ARGN})
  if(NOT M_SOURCES)  # a module whose code has not landed yet
    add_library(${name} INTERFACE)
    return()
  endif()
  add_library(${name} OBJECT ${M_SOURCES})
  set(includes ${CMAKE_CURRENT_SOURCE_DIR}/include ${PROJECT_SOURCE_DIR}/ft/include ${PROJECT_SOURCE_DIR}/include)
  foreach(used ${M_USES})
    list(APPEND includes ${PROJECT_SOURCE_DIR}/${used}/include)
  endforeach()
  target_include_directories(${name} PUBLIC ${includes})
  target_link_libraries(${name} PUBLIC MPI::MPI_CXX Threads::Threads ${M_PUBLIC_DEPS}
                                PRIVATE $<BUILD_INTERFACE:flashrec_warnings> ${M_PRIVATE_DEPS})
endfunction()

# Tests and tools built inside the tree may use internal headers (never installed).
add_library(flashrec_internal INTERFACE)
target_include_directories(flashrec_internal INTERFACE
  ${PROJECT_SOURCE_DIR}/include ${PROJECT_SOURCE_DIR}/ft/include ${PROJECT_SOURCE_DIR}/runtime/include
  ${PROJECT_SOURCE_DIR}/spares/include ${PROJECT_SOURCE_DIR}/slurm/include)
target_link_libraries(flashrec_internal INTERFACE flashrec yaml-cpp flashrec_warnings)
