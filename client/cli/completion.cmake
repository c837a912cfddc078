# Writes `KTUNE completion SHELL_NAME` to OUTPUT; fails the build if ktune fails.
# Usage: cmake -DKTUNE=path/to/ktune -DSHELL_NAME=bash -DOUTPUT=file -P completion.cmake
execute_process(COMMAND ${KTUNE} completion ${SHELL_NAME}
  OUTPUT_FILE ${OUTPUT}.tmp RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  file(REMOVE ${OUTPUT}.tmp)
  message(FATAL_ERROR "${KTUNE} completion ${SHELL_NAME} failed: ${rc}")
endif()
file(RENAME ${OUTPUT}.tmp ${OUTPUT})
