# Third-party packages (DESIGN.md lists the chosen ones). On Debian they all come from apt; the
# README's commands install whatever is missing.

find_package(CLI11 REQUIRED)
find_package(nlohmann_json 3.10 REQUIRED)
find_package(Boost 1.74 REQUIRED)  # headers only: Multiprecision, Math
find_package(Eigen3 3.3 REQUIRED NO_MODULE)
find_package(Threads REQUIRED)
find_package(rapidcheck REQUIRED)  # the harness's case generators (and the property tests)

if(FLASHCHECK_TESTS)
  find_package(GTest REQUIRED)
endif()
