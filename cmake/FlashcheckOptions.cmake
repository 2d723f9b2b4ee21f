# Build options: which optional backends to build, and the warnings every target of ours gets.

set(FLASHCHECK_CUDA AUTO CACHE STRING "Build the CUDA kernels: AUTO (when nvcc is found), ON, OFF")
set_property(CACHE FLASHCHECK_CUDA PROPERTY STRINGS AUTO ON OFF)
set(FLASHCHECK_TORCH AUTO CACHE STRING "Build the libtorch adapters: AUTO (when libtorch is found), ON, OFF")
set_property(CACHE FLASHCHECK_TORCH PROPERTY STRINGS AUTO ON OFF)
option(FLASHCHECK_TESTS "Build the tests" ON)
option(FLASHCHECK_WERROR "Treat warnings as errors in flashcheck's own targets" OFF)

# --- CUDA ---------------------------------------------------------------------------------------
set(FLASHCHECK_HAVE_CUDA OFF)
if(NOT FLASHCHECK_CUDA STREQUAL "OFF")
  # The toolkit's default location is often not on PATH; look there too.
  if(NOT CMAKE_CUDA_COMPILER AND NOT DEFINED ENV{CUDACXX} AND EXISTS /usr/local/cuda/bin/nvcc)
    set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
  endif()
  include(CheckLanguage)
  check_language(CUDA)
  # The kernels need nvcc >= 12 (sm_90a, C++20). An older toolkit (Debian's own is 11.8) is skipped
  # under AUTO rather than failing the configure.
  if(CMAKE_CUDA_COMPILER)
    execute_process(COMMAND ${CMAKE_CUDA_COMPILER} --version OUTPUT_VARIABLE nvcc_version_text ERROR_QUIET)
    string(REGEX MATCH "release ([0-9]+)\\.([0-9]+)" nvcc_release "${nvcc_version_text}")
    if(NOT nvcc_release OR CMAKE_MATCH_1 LESS 12)
      set(message_text "nvcc at ${CMAKE_CUDA_COMPILER} is older than 12.0 (${nvcc_release})")
      if(FLASHCHECK_CUDA STREQUAL "ON")
        message(FATAL_ERROR "FLASHCHECK_CUDA=ON but ${message_text}")
      endif()
      message(WARNING "${message_text}: building without CUDA")
      unset(CMAKE_CUDA_COMPILER CACHE)
      unset(CMAKE_CUDA_COMPILER)
    endif()
  endif()
  if(CMAKE_CUDA_COMPILER)
    # Hopper (sm_90a: wgmma, TMA) unless the user names other architectures.
    if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
      set(CMAKE_CUDA_ARCHITECTURES 90a)
    endif()
    # The shared CUDA runtime everywhere: a target with CUDA code would otherwise link cudart_static and
    # cudadevrt into whatever links it, the PyTorch extension included, beside the libcudart.so that
    # libtorch loads (two runtimes in one process).
    set(CMAKE_CUDA_RUNTIME_LIBRARY Shared)
    enable_language(CUDA)
    # CMake < 3.26 has no C++20 dialect for nvcc; teach it the flag (nvcc >= 12 accepts -std=c++20).
    if(NOT DEFINED CMAKE_CUDA20_STANDARD_COMPILE_OPTION)
      set(CMAKE_CUDA20_STANDARD_COMPILE_OPTION "-std=c++20")
      set(CMAKE_CUDA20_EXTENSION_COMPILE_OPTION "-std=c++20")
      list(APPEND CMAKE_CUDA_COMPILE_FEATURES cuda_std_20)
      set(CMAKE_CUDA20_COMPILE_FEATURES cuda_std_20)
    endif()
    set(CMAKE_CUDA_STANDARD 20)
    set(CMAKE_CUDA_STANDARD_REQUIRED ON)
    set(CMAKE_CUDA_EXTENSIONS OFF)
    find_package(CUDAToolkit REQUIRED)
    set(FLASHCHECK_HAVE_CUDA ON)
  elseif(FLASHCHECK_CUDA STREQUAL "ON")
    message(FATAL_ERROR "FLASHCHECK_CUDA=ON but no CUDA compiler was found (set CUDACXX or CMAKE_CUDA_COMPILER)")
  endif()
endif()

# --- libtorch -----------------------------------------------------------------------------------
set(FLASHCHECK_HAVE_TORCH OFF)
if(NOT FLASHCHECK_TORCH STREQUAL "OFF")
  # libtorch's CMake config overwrites CMAKE_CUDA_ARCHITECTURES (to OFF) and appends its own -gencode
  # flags for the detected GPU (sm_90, not sm_90a): keep ours.
  set(flashcheck_cuda_architectures "${CMAKE_CUDA_ARCHITECTURES}")
  set(flashcheck_cuda_flags "${CMAKE_CUDA_FLAGS}")
  find_package(Torch QUIET)
  set(CMAKE_CUDA_ARCHITECTURES "${flashcheck_cuda_architectures}")
  set(CMAKE_CUDA_FLAGS "${flashcheck_cuda_flags}")
  if(Torch_FOUND)
    set(FLASHCHECK_HAVE_TORCH ON)
    # libtorch uses the shared libstdc++. A g++ whose own library folder holds only libstdc++.a links
    # it statically (seen on the GPU machine: /opt/gcc/lib/gcc/x86_64-linux-gnu/13/libstdc++.a), which
    # puts a second C++ runtime into every process that loads libtorch: streams and allocations of one
    # used by the other ("free(): invalid pointer" at exit; a segfault formatting an error message in the
    # PyTorch extension). Link the system's shared libstdc++ first, so the static one supplies nothing.
    execute_process(COMMAND ${CMAKE_CXX_COMPILER} -print-file-name=libstdc++.so
                    OUTPUT_VARIABLE flashcheck_libstdcxx_so OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
    if(NOT IS_ABSOLUTE "${flashcheck_libstdcxx_so}")
      find_library(FLASHCHECK_SHARED_LIBSTDCXX NAMES libstdc++.so.6
                   PATHS /usr/lib/x86_64-linux-gnu /lib/x86_64-linux-gnu /usr/lib64 NO_DEFAULT_PATH)
      if(FLASHCHECK_SHARED_LIBSTDCXX)
        message(STATUS "flashcheck: ${CMAKE_CXX_COMPILER} links libstdc++ statically; linking ${FLASHCHECK_SHARED_LIBSTDCXX} as libtorch does")
        link_libraries(${FLASHCHECK_SHARED_LIBSTDCXX})
      else()
        message(WARNING "${CMAKE_CXX_COMPILER} links libstdc++ statically and no shared libstdc++.so.6 was found: "
                        "programs that load libtorch will carry two C++ runtimes")
      endif()
    endif()
  elseif(FLASHCHECK_TORCH STREQUAL "ON")
    message(FATAL_ERROR "FLASHCHECK_TORCH=ON but libtorch was not found (add its prefix to CMAKE_PREFIX_PATH)")
  endif()
endif()

# --- warnings -----------------------------------------------------------------------------------
add_library(flashcheck_warnings INTERFACE)
target_compile_options(flashcheck_warnings INTERFACE
  $<$<COMPILE_LANGUAGE:CXX,C>:-Wall -Wextra>
  $<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-Wall,-Wextra>)
# GCC 12 reports -Wrestrict falsely on ordinary std::string concatenation at -O2/-O3 (GCC bugs 105329,
# 105651; fixed in 13): silence that one warning for that compiler only.
if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU" AND CMAKE_CXX_COMPILER_VERSION VERSION_GREATER_EQUAL 12
   AND CMAKE_CXX_COMPILER_VERSION VERSION_LESS 13)
  target_compile_options(flashcheck_warnings INTERFACE $<$<COMPILE_LANGUAGE:CXX>:-Wno-restrict>)
endif()
if(FLASHCHECK_WERROR)
  target_compile_options(flashcheck_warnings INTERFACE
    $<$<COMPILE_LANGUAGE:CXX,C>:-Werror>
    $<$<COMPILE_LANGUAGE:CUDA>:-Werror=all-warnings -Xcompiler=-Werror>)
endif()
