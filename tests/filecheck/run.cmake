# Runs the tool of the file's '# RUN:' line (reel-opt or reel-opt-test) with its
# options, then FileCheck on the output.
file(STRINGS ${INPUT} run_line REGEX "^# RUN: reel-opt(-test)? ")
if(NOT run_line)
  message(FATAL_ERROR "${INPUT}: no '# RUN: reel-opt ...' line")
endif()
set(tool ${REEL_OPT})
if(run_line MATCHES "^# RUN: reel-opt-test ")
  set(tool ${REEL_OPT_TEST})
endif()
string(REGEX REPLACE "^# RUN: reel-opt(-test)? *" "" args "${run_line}")
separate_arguments(args)
# A file with a '# EXPECT-ERROR' line passes when the tool exits with status 1 (an
# error it reported, not a crash); FileCheck then reads what it wrote to stderr.
# With a '# STDERR' line, FileCheck reads what the tool wrote to stderr followed by
# its stdout. '# ENV: NAME=VALUE' lines set environment variables for the tool.
file(STRINGS ${INPUT} expect_error REGEX "^# EXPECT-ERROR")
file(STRINGS ${INPUT} read_stderr REGEX "^# STDERR")
file(STRINGS ${INPUT} env_lines REGEX "^# ENV: ")
list(TRANSFORM env_lines REPLACE "^# ENV: *" "")
execute_process(COMMAND ${CMAKE_COMMAND} -E env ${env_lines} ${tool} ${args} ${INPUT}
                OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc)
if(read_stderr)
  set(out "${err}${out}")
endif()
if(expect_error)
  if(NOT rc STREQUAL "1")
    message(FATAL_ERROR "${tool} was expected to report an error (status 1), got '${rc}'")
  endif()
  set(out "${err}")
elseif(NOT rc EQUAL 0)
  message(FATAL_ERROR "${tool} failed (${rc})")
endif()
file(WRITE ${OUTPUT} "${out}")
execute_process(COMMAND ${FILECHECK} ${INPUT} --input-file=${OUTPUT} RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "FileCheck failed")
endif()
