# Installs the build tree into a fresh prefix, then configures, builds and
# runs an outside project (consumer/) that uses find_package(unicache):
#   core                 no component, with oneDNN and OpenCL hidden from
#                        find_package: the core needs neither;
#   components           COMPONENTS <every component this build has>: links
#                        unicache::onednn_cpu / unicache::opencl /
#                        unicache::remote (the build tree's names) and runs;
#   <backend>_no_dep     that backend with its dependency hidden: REQUIRED
#                        fails find_package, OPTIONAL leaves the core usable;
#   unknown_*            a component that does not exist: REQUIRED fails
#                        find_package and says why, OPTIONAL gives
#                        unicache_<component>_FOUND FALSE;
#   <backend>_not_built  each backend (or the remote component) this build
#                        lacks: the same;
#   c_interface          a C program (consumer_c/) with COMPONENTS c.
# Every case runs; the failures are listed at the end.
#   cmake -DBUILD_DIR=... -DCONSUMER_DIR=... -DWORK_DIR=... -DCOMPONENTS=onednn_cpu,opencl,cuda -P run_install_test.cmake
# COMPONENTS: the backends and the remote component the build has, comma-separated.
cmake_minimum_required(VERSION 3.25)  # policies of a script: IN_LIST and the rest
file(REMOVE_RECURSE ${WORK_DIR})
execute_process(COMMAND ${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${WORK_DIR}/prefix
                RESULT_VARIABLE rc OUTPUT_QUIET)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "cmake --install failed")
endif()

string(REPLACE "," ";" built "${COMPONENTS}")
set(failures "")

# consumer(<case> [ARGS <cmake -D...>...] [RUN <program>...] [FAIL_MATCHING <regex>...])
# Configures consumer/ with ARGS; with FAIL_MATCHING, configuring must fail
# and its output match every regex; else it must configure and build, and
# each RUN program must exit 0 printing "<program>: hit" or "<program>: ok".
function(consumer case)
  cmake_parse_arguments(ARG "" "DIR" "ARGS;RUN;FAIL_MATCHING" ${ARGN})
  set(build ${WORK_DIR}/${case})
  if(NOT ARG_DIR)
    set(ARG_DIR ${CONSUMER_DIR})
  endif()
  execute_process(COMMAND ${CMAKE_COMMAND} -S ${ARG_DIR} -B ${build}
                    -DCMAKE_PREFIX_PATH=${WORK_DIR}/prefix -DCMAKE_BUILD_TYPE=Release ${ARG_ARGS}
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
  set(failure "")
  if(ARG_FAIL_MATCHING)
    # CMake wraps the reason a package gives: match it as one line.
    string(REGEX REPLACE "[ \n]+" " " out_line "${out}")
    if(rc EQUAL 0)
      set(failure "find_package(unicache) succeeded; it should have failed")
    endif()
    foreach(regex IN LISTS ARG_FAIL_MATCHING)
      if(NOT out_line MATCHES "${regex}")
        string(APPEND failure " the error does not match '${regex}'")
      endif()
    endforeach()
  elseif(NOT rc EQUAL 0)
    set(failure "configuring failed")
  else()
    execute_process(COMMAND ${CMAKE_COMMAND} --build ${build}
                    RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
    if(NOT rc EQUAL 0)
      set(failure "building failed")
    endif()
    foreach(program IN LISTS ARG_RUN)
      if(failure)
        break()
      endif()
      # A store of its own: a consumer never writes to the user's cache.
      execute_process(COMMAND ${CMAKE_COMMAND} -E env UNICACHE_PERSISTENT_CACHE_DIR=${WORK_DIR}/store
                              ${build}/${program}
                      RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
      if(NOT rc EQUAL 0 OR NOT out MATCHES "${program}: (hit|ok)")
        set(failure "${program} failed (exit ${rc})")
      endif()
    endforeach()
  endif()
  if(failure)
    message("-- ${case}: FAILED: ${failure}\n${out}")
    set(failures ${failures} ${case} PARENT_SCOPE)
  else()
    message(STATUS "${case}: ok ${ARG_RUN}")
  endif()
endfunction()

consumer(core ARGS -DCMAKE_DISABLE_FIND_PACKAGE_dnnl=ON -DCMAKE_DISABLE_FIND_PACKAGE_OpenCL=ON RUN consumer)

set(runs consumer)
foreach(backend IN LISTS built)
  list(APPEND runs consumer_${backend})
endforeach()
if(built)
  consumer(components ARGS -DCONSUMER_COMPONENTS=${COMPONENTS} RUN ${runs})
endif()

set(dependency_onednn_cpu dnnl)
set(dependency_opencl OpenCL)
set(dependency_cuda "")  # none: it loads the driver and NVRTC at run time
foreach(backend IN LISTS built)
  if(NOT dependency_${backend})
    continue()
  endif()
  set(hide -DCMAKE_DISABLE_FIND_PACKAGE_${dependency_${backend}}=ON)
  consumer(${backend}_no_dep_required ARGS ${hide} -DCONSUMER_COMPONENTS=${backend}
           FAIL_MATCHING "${dependency_${backend}}")
  consumer(${backend}_no_dep_optional ARGS ${hide} -DCONSUMER_OPTIONAL_COMPONENTS=${backend}
           -DCONSUMER_EXPECT_MISSING=${backend} RUN consumer)
endforeach()

# A C program with the C interface alone (consumer_c/, next to consumer/).
consumer(c_interface DIR ${CONSUMER_DIR}/../consumer_c RUN consumer_c)

consumer(unknown_required ARGS -DCONSUMER_COMPONENTS=no_such_component
         FAIL_MATCHING "Reason given by package" "no_such_component: no such component")
consumer(unknown_optional ARGS -DCONSUMER_OPTIONAL_COMPONENTS=no_such_component
         -DCONSUMER_EXPECT_MISSING=no_such_component RUN consumer)

foreach(backend IN ITEMS onednn_cpu opencl cuda remote)
  if(NOT backend IN_LIST built)
    consumer(${backend}_not_built_required ARGS -DCONSUMER_COMPONENTS=${backend}
             FAIL_MATCHING "Reason given by package" "${backend}: this installation was built without it")
    consumer(${backend}_not_built_optional ARGS -DCONSUMER_OPTIONAL_COMPONENTS=${backend}
             -DCONSUMER_EXPECT_MISSING=${backend} RUN consumer)
  endif()
endforeach()

if(failures)
  message(FATAL_ERROR "install test: failed cases: ${failures}")
endif()
message(STATUS "installed package works")
