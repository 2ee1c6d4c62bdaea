# Run by the help_<program> tests (unicache_help_test.cmake):
#   cmake -DPROGRAM=path [-DHELP_FORMS=--help,-h,...] [-DREJECTS_UNKNOWN=ON] -P run_help_test.cmake
# PROGRAM --help (and each other of HELP_FORMS) must print its usage on stdout
# and exit 0; with REJECTS_UNKNOWN, PROGRAM --no-such-option must print it on
# stderr and exit 2.
cmake_minimum_required(VERSION 3.25)

if(NOT HELP_FORMS)
  set(HELP_FORMS --help)
endif()
string(REPLACE "," ";" HELP_FORMS "${HELP_FORMS}")
foreach(form IN LISTS HELP_FORMS)
  execute_process(COMMAND "${PROGRAM}" ${form}
                  RESULT_VARIABLE status OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 30)
  if(NOT status STREQUAL "0")
    message(FATAL_ERROR "${PROGRAM} ${form} exited with ${status}, not 0\nstdout:\n${out}\nstderr:\n${err}")
  endif()
  string(TOLOWER "${out}" lower)
  if(NOT lower MATCHES "usage")
    message(FATAL_ERROR "${PROGRAM} ${form} printed no usage on stdout\nstdout:\n${out}\nstderr:\n${err}")
  endif()
endforeach()

if(REJECTS_UNKNOWN)
  execute_process(COMMAND "${PROGRAM}" --no-such-option
                  RESULT_VARIABLE status OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 30)
  if(NOT status STREQUAL "2")
    message(FATAL_ERROR "${PROGRAM} --no-such-option exited with ${status}, not 2\nstdout:\n${out}\nstderr:\n${err}")
  endif()
  string(TOLOWER "${err}" lower)
  if(NOT lower MATCHES "usage")
    message(FATAL_ERROR "${PROGRAM} --no-such-option printed no usage on stderr\nstdout:\n${out}\nstderr:\n${err}")
  endif()
endif()
