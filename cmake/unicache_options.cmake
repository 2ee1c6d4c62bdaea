# Warnings and sanitizers for every target of the project.
add_compile_options(-Wall -Wextra -Wpedantic)
if(CMAKE_CXX_COMPILER_ID MATCHES "Clang")
  # Checks the lock discipline written with ABSL_GUARDED_BY and friends.
  add_compile_options(-Wthread-safety)
endif()

if(UNICACHE_SANITIZE STREQUAL "thread")
  add_compile_options(-fsanitize=thread -fno-omit-frame-pointer)
  add_link_options(-fsanitize=thread)
elseif(UNICACHE_SANITIZE STREQUAL "address")
  add_compile_options(-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer)
  add_link_options(-fsanitize=address,undefined)
elseif(NOT UNICACHE_SANITIZE STREQUAL "")
  message(FATAL_ERROR "UNICACHE_SANITIZE must be empty, 'thread' or 'address', not '${UNICACHE_SANITIZE}'")
endif()

# The version header carries the git hash: the persistent store keys on it.
execute_process(COMMAND git rev-parse --short=12 HEAD
                WORKING_DIRECTORY ${PROJECT_SOURCE_DIR}
                OUTPUT_VARIABLE UNICACHE_GIT_HASH OUTPUT_STRIP_TRAILING_WHITESPACE
                ERROR_QUIET RESULT_VARIABLE git_result)
if(NOT git_result EQUAL 0 OR UNICACHE_GIT_HASH STREQUAL "")
  set(UNICACHE_GIT_HASH "unknown")
endif()
configure_file(${PROJECT_SOURCE_DIR}/cmake/version.hpp.in ${PROJECT_BINARY_DIR}/include/unicache/version.hpp @ONLY)
