# Script mode (cmake -P): writes build_info.cpp from its template, touching it only when the content
# changes so an unchanged commit does not relink anything.
execute_process(COMMAND git -C "${SOURCE_DIR}" rev-parse --short=12 HEAD
                OUTPUT_VARIABLE GIT_COMMIT OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET RESULT_VARIABLE rc)
# A copy of the tree (e.g. the one sent to the GPU machine) names its commit explicitly: its .git, if it
# has one, need not be the tree's (the GPU machine's copy reported this session's first commit).
if(DEFINED ENV{FLASHCHECK_COMMIT})
  set(GIT_COMMIT "$ENV{FLASHCHECK_COMMIT}")
elseif(NOT rc EQUAL 0 OR GIT_COMMIT STREQUAL "")
  set(GIT_COMMIT "unknown")
endif()
execute_process(COMMAND git -C "${SOURCE_DIR}" status --porcelain --untracked-files=no
                OUTPUT_VARIABLE GIT_STATUS OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
if(GIT_COMMIT STREQUAL "unknown" OR DEFINED ENV{FLASHCHECK_COMMIT})
  set(GIT_STATUS "")  # no git here: the dirty state is unknown, not dirty
endif()
if(GIT_STATUS STREQUAL "")
  set(GIT_DIRTY false)
else()
  set(GIT_DIRTY true)
endif()
foreach(flag HAVE_CUDA HAVE_TORCH)
  if(${flag})
    set(${flag} true)
  else()
    set(${flag} false)
  endif()
endforeach()
configure_file("${TEMPLATE}" "${OUTPUT}.tmp" @ONLY)
file(COPY_FILE "${OUTPUT}.tmp" "${OUTPUT}" ONLY_IF_DIFFERENT)
file(REMOVE "${OUTPUT}.tmp")
