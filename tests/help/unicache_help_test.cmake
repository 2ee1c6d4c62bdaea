# unicache_help_test(target LABELS label... [HELP_FORMS form...] [REJECTS_UNKNOWN]):
# a CTest test, help_<target>, that checks that the program answers --help as
# every program of the project does: its usage on stdout (a line that says
# "usage", any case) and exit 0, running nothing else. HELP_FORMS: the
# arguments that must answer so (default --help). REJECTS_UNKNOWN, for a
# program that parses its own options: --no-such-option prints the usage on
# stderr and exits 2. The test has the label "help" as well as LABELS.
#
# Included by the CMakeLists.txt that defines the programs (the tool's test
# is in tests/CMakeLists.txt: CTest is enabled after tools/ is read); a no-op
# unless the tests are built.

# The labels of a program that drives the GPU backends this build has
# (unicache_gpu_backends).
set(UNICACHE_GPU_LABELS "")
if(UNICACHE_WITH_OPENCL)
  list(APPEND UNICACHE_GPU_LABELS opencl)
endif()
if(UNICACHE_WITH_CUDA)
  list(APPEND UNICACHE_GPU_LABELS cuda)
endif()

function(unicache_help_test target)
  if(NOT UNICACHE_BUILD_TESTS)
    return()
  endif()
  cmake_parse_arguments(ARG "REJECTS_UNKNOWN" "" "LABELS;HELP_FORMS" ${ARGN})
  # Comma-separated: a ';' would split the test's command line.
  string(REPLACE ";" "," forms "${ARG_HELP_FORMS}")
  add_test(NAME help_${target}
           COMMAND ${CMAKE_COMMAND}
             -DPROGRAM=$<TARGET_FILE:${target}>
             -DHELP_FORMS=${forms}
             -DREJECTS_UNKNOWN=${ARG_REJECTS_UNKNOWN}
             -P ${PROJECT_SOURCE_DIR}/tests/help/run_help_test.cmake)
  set_tests_properties(help_${target} PROPERTIES LABELS "help;${ARG_LABELS}" TIMEOUT 120)
endfunction()
