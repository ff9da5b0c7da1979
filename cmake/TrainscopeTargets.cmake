# Helpers shared by all layers.

# Warnings we hold our own code to (never third-party headers: those come in as SYSTEM).
function(trainscope_warnings target)
  target_compile_options(${target} PRIVATE
    $<$<COMPILE_LANGUAGE:CXX,C>:-Wall -Wextra -Wpedantic -Wshadow -Wnon-virtual-dtor
      -Wcast-align -Wunused -Woverloaded-virtual -Wimplicit-fallthrough
      -Wno-missing-field-initializers>)  # designated initializers leave the rest defaulted on purpose
  if(TRAINSCOPE_WERROR)
    target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX,C>:-Werror>)
  endif()
endfunction()

# Fails the configure step when one of the given targets links Qt, directly or through an
# interface dependency. tests/tst_layering checks the built binaries as well.
function(trainscope_assert_no_qt)
  foreach(target IN LISTS ARGN)
    if(NOT TARGET ${target})
      continue()
    endif()
    set(seen "")
    set(queue ${target})
    while(queue)
      list(POP_FRONT queue t)
      if(t IN_LIST seen)
        continue()
      endif()
      list(APPEND seen ${t})
      if(t MATCHES "^Qt[0-9]*::" OR t MATCHES "Qt6")
        message(FATAL_ERROR "${target} links Qt (${t}); core, profiler and agents must stay free of Qt")
      endif()
      if(TARGET ${t})
        get_target_property(libs ${t} LINK_LIBRARIES)
        get_target_property(ilibs ${t} INTERFACE_LINK_LIBRARIES)
        foreach(l IN LISTS libs ilibs)
          if(l AND NOT l MATCHES "-NOTFOUND$" AND NOT l MATCHES "^\\$<")
            list(APPEND queue ${l})
          endif()
        endforeach()
      endif()
    endwhile()
  endforeach()
endfunction()
