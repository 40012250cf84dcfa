# Installs the build into a scratch prefix, builds tests/consumer against it with
# find_package(reel), and runs the result (the demo program).
file(REMOVE_RECURSE ${WORK})
execute_process(COMMAND ${CMAKE_COMMAND} --install ${BUILD} --prefix ${WORK}/prefix
                RESULT_VARIABLE rc OUTPUT_QUIET)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "cmake --install failed")
endif()
# A sanitizer build's libraries need the sanitizers' run-time libraries linked in.
set(link_flags "")
if(SANITIZE)
  set(link_flags "-DCMAKE_EXE_LINKER_FLAGS=-fsanitize=${SANITIZE}")
endif()
execute_process(COMMAND ${CMAKE_COMMAND} -S ${SOURCE}/tests/consumer -B ${WORK}/build
                        -DCMAKE_PREFIX_PATH=${WORK}/prefix -DREEL_DEMO_SOURCE=${SOURCE}/examples/demo.cpp
                        -DCMAKE_BUILD_TYPE=Release ${link_flags}
                RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "configuring the consumer failed")
endif()
execute_process(COMMAND ${CMAKE_COMMAND} --build ${WORK}/build RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "building the consumer failed")
endif()
execute_process(COMMAND ${WORK}/build/consumer OUTPUT_VARIABLE out RESULT_VARIABLE rc)
if(NOT rc EQUAL 0 OR NOT out MATCHES "dL/dx = f64\\[5\\] \\[0\\.19661193324148185")
  message(FATAL_ERROR "the consumer ran wrong (${rc}):\n${out}")
endif()
