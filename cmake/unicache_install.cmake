# unicache_install_component(<target>): installs a library target with an
# export set of its own, <target>Targets, under the unicache:: namespace, so
# that unicacheConfig.cmake can load each package component on its own (a
# user of the core alone needs neither oneDNN, OpenCL nor CUDA).
function(unicache_install_component target)
  install(TARGETS ${target} EXPORT ${target}Targets
          ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
          LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
          RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
  install(EXPORT ${target}Targets NAMESPACE unicache::
          DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/unicache)
endfunction()

# unicache_backend_library(<component> SOURCES <file>...): the library of
# the backend (or backend core) in the current folder: unicache_<component>,
# also unicache::<component> in and out of tree, with its public headers
# (include/unicache, installed) and its internal ones (src, never
# installed), position-independent, installed as its own package component.
# Link what it needs with target_link_libraries afterwards.
function(unicache_backend_library component)
  cmake_parse_arguments(PARSE_ARGV 1 arg "" "" "SOURCES")
  set(target unicache_${component})
  add_library(${target} ${arg_SOURCES})
  add_library(unicache::${component} ALIAS ${target})
  target_include_directories(${target}
    PUBLIC
      $<BUILD_INTERFACE:${CMAKE_CURRENT_SOURCE_DIR}/include>
      $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>
    PRIVATE
      ${CMAKE_CURRENT_SOURCE_DIR}/src)
  set_target_properties(${target} PROPERTIES POSITION_INDEPENDENT_CODE ON EXPORT_NAME ${component})
  install(DIRECTORY include/unicache DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
  unicache_install_component(${target})
endfunction()
