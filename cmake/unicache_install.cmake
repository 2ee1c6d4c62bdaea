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
