# Configures the project with backend dependencies hidden from find_package:
# with a backend ON, configuration must fail, naming the Debian packages to
# install and the option that turns the backend off; with the backends whose
# dependencies are hidden OFF, it must succeed.
#   cmake -DSOURCE_DIR=... -DWORK_DIR=... -DCXX=... -P run_configure_test.cmake
cmake_minimum_required(VERSION 3.25)  # policies of a script: IN_LIST and the rest
file(REMOVE_RECURSE ${WORK_DIR})
set(failures "")

# configure(<case> ARGS <cmake -D...>... [FAIL_NAMING <text>...])
function(configure case)
  cmake_parse_arguments(ARG "" "" "ARGS;FAIL_NAMING" ${ARGN})
  # Only the libraries: tests, benchmarks and examples add nothing here.
  execute_process(COMMAND ${CMAKE_COMMAND} -S ${SOURCE_DIR} -B ${WORK_DIR}/${case}
                    -DCMAKE_CXX_COMPILER=${CXX} ${ARG_ARGS}
                    -DUNICACHE_BUILD_TESTS=OFF -DUNICACHE_BUILD_BENCHMARKS=OFF -DUNICACHE_BUILD_EXAMPLES=OFF
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
  set(failure "")
  if(ARG_FAIL_NAMING)
    if(rc EQUAL 0)
      set(failure "configured; it should have failed")
    endif()
    foreach(text IN LISTS ARG_FAIL_NAMING)
      string(FIND "${out}" "${text}" at)
      if(at EQUAL -1)
        string(APPEND failure " the error does not name '${text}'")
      endif()
    endforeach()
  elseif(NOT rc EQUAL 0)
    set(failure "configuring failed")
  endif()
  if(failure)
    message("-- ${case}: FAILED: ${failure}\n${out}")
    set(failures ${failures} ${case} PARENT_SCOPE)
  else()
    message(STATUS "${case}: ok")
  endif()
endfunction()

configure(onednn_missing ARGS -DCMAKE_DISABLE_FIND_PACKAGE_dnnl=ON -DUNICACHE_WITH_ONEDNN=ON
          FAIL_NAMING libdnnl-dev -DUNICACHE_WITH_ONEDNN=OFF)
# oneDNN OFF too: Debian's dnnl-config.cmake itself requires OpenCL.
configure(opencl_missing ARGS -DCMAKE_DISABLE_FIND_PACKAGE_OpenCL=ON -DUNICACHE_WITH_OPENCL=ON
          -DUNICACHE_WITH_ONEDNN=OFF
          FAIL_NAMING ocl-icd-opencl-dev opencl-headers -DUNICACHE_WITH_OPENCL=OFF)
configure(onednn_off ARGS -DCMAKE_DISABLE_FIND_PACKAGE_dnnl=ON -DUNICACHE_WITH_ONEDNN=OFF -DUNICACHE_WITH_OPENCL=ON)
configure(both_off ARGS -DCMAKE_DISABLE_FIND_PACKAGE_dnnl=ON -DCMAKE_DISABLE_FIND_PACKAGE_OpenCL=ON
          -DUNICACHE_WITH_ONEDNN=OFF -DUNICACHE_WITH_OPENCL=OFF)

file(REMOVE_RECURSE ${WORK_DIR})
if(failures)
  message(FATAL_ERROR "configure test: failed cases: ${failures}")
endif()
