# reel_add_library(name SOURCES... DEPS...): one pipeline stage as a static library
# named reel_<name>, with its public headers in <folder>/include.
function(reel_add_library name)
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPS;PRIVATE_DEPS" ${ARGN})
  add_library(reel_${name} STATIC ${ARG_SOURCES})
  add_library(reel::${name} ALIAS reel_${name})
  target_include_directories(reel_${name} PUBLIC
    $<BUILD_INTERFACE:${CMAKE_CURRENT_SOURCE_DIR}/include>
    $<INSTALL_INTERFACE:include>)
  target_link_libraries(reel_${name} PUBLIC ${ARG_DEPS} PRIVATE ${ARG_PRIVATE_DEPS})
  target_compile_options(reel_${name} PRIVATE -Wall -Wextra -Werror=switch)
  set_property(GLOBAL APPEND PROPERTY REEL_LIBRARIES reel_${name})
endfunction()
