# flashcheck_add_gtest(NAME <target> SOURCES <files...> LIBS <targets...> LABELS <labels...>
#                      [TIMEOUT <seconds>] [ENVIRONMENT <VAR=value...>])
#
# One GoogleTest executable whose tests are discovered into CTest individually, each carrying the
# module's label. Labels: precision oracle kernels gradcheck experiments reports, plus `gpu` (needs
# a GPU: such tests call GTEST_SKIP with the reason when none is present, and CTest reports them as
# skipped) and `long` (excluded from the default test command).
include(GoogleTest)

function(flashcheck_add_gtest)
  cmake_parse_arguments(ARG "" "NAME;TIMEOUT" "SOURCES;LIBS;LABELS;ENVIRONMENT" ${ARGN})
  if(NOT ARG_TIMEOUT)
    set(ARG_TIMEOUT 600)
  endif()
  add_executable(${ARG_NAME} ${ARG_SOURCES})
  set_target_properties(${ARG_NAME} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${PROJECT_BINARY_DIR}/tests)
  target_link_libraries(${ARG_NAME} PRIVATE ${ARG_LIBS} GTest::gtest GTest::gtest_main
                        rapidcheck rapidcheck_gtest flashcheck_warnings Threads::Threads)
  gtest_discover_tests(${ARG_NAME}
    DISCOVERY_MODE PRE_TEST
    WORKING_DIRECTORY ${PROJECT_SOURCE_DIR}
    TEST_LIST ${ARG_NAME}_TESTS
    PROPERTIES TIMEOUT ${ARG_TIMEOUT})
  # Labels and environment are lists, which gtest_discover_tests's PROPERTIES flattens (a test would
  # get only its first label). A small script run after the discovered tests are defined sets them.
  set(properties_script ${CMAKE_CURRENT_BINARY_DIR}/${ARG_NAME}_properties.cmake)
  file(WRITE ${properties_script}
    "if(${ARG_NAME}_TESTS)\n"
    "  set_tests_properties(\${${ARG_NAME}_TESTS} PROPERTIES\n"
    "    LABELS \"${ARG_LABELS}\"\n"
    "    ENVIRONMENT \"${ARG_ENVIRONMENT}\")\n"
    "endif()\n")
  set_property(DIRECTORY APPEND PROPERTY TEST_INCLUDE_FILES ${properties_script})
endfunction()
