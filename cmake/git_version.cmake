# Writes the version header (config/ktune_version.h.in) with `git describe` of the source tree as
# it is now. Run at every build (the ktune_version_header target), not only when CMake
# configures, so a binary never reports a commit it was not built from; configure_file leaves
# the header untouched when nothing changed, so an unchanged tree recompiles nothing.
# -D: SOURCE_DIR, INPUT, OUTPUT, PROJECT_VERSION, GIT_EXECUTABLE ("" without git).
set(KTUNE_GIT_DESCRIBE "unknown")
if(GIT_EXECUTABLE)
  execute_process(COMMAND ${GIT_EXECUTABLE} describe --always --dirty --tags
                  WORKING_DIRECTORY ${SOURCE_DIR}
                  OUTPUT_VARIABLE describe OUTPUT_STRIP_TRAILING_WHITESPACE
                  RESULT_VARIABLE result ERROR_QUIET)
  if(result EQUAL 0 AND describe)
    set(KTUNE_GIT_DESCRIBE "${describe}")
  endif()
endif()
configure_file(${INPUT} ${OUTPUT} @ONLY)
