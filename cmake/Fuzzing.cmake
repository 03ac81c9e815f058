# AOTINFER_FUZZ: a build of the libFuzzer targets in tests/fuzz. Everything in this build is
# compiled with coverage instrumentation, AddressSanitizer and UndefinedBehaviorSanitizer (any
# undefined behaviour aborts), so use a build dir of its own: tests/fuzz/run.sh makes one.
if(NOT CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
  message(FATAL_ERROR
    "AOTINFER_FUZZ=ON needs Clang with libFuzzer; the C++ compiler here is ${CMAKE_CXX_COMPILER_ID} "
    "(${CMAKE_CXX_COMPILER}). Configure a separate build dir with -DCMAKE_CXX_COMPILER=clang++-14 "
    "-DCMAKE_C_COMPILER=clang-14 (Debian: apt install clang-14 libclang-rt-14-dev), or run "
    "tests/fuzz/run.sh BUILD_DIR SECONDS, which does that.")
endif()
include(CheckCXXSourceCompiles)
set(CMAKE_REQUIRED_FLAGS "-fsanitize=fuzzer,address,undefined")
check_cxx_source_compiles(
  "#include <cstdint>\n#include <cstddef>\nextern \"C\" int LLVMFuzzerTestOneInput(const uint8_t*, size_t) { return 0; }"
  AOTINFER_HAVE_LIBFUZZER)
unset(CMAKE_REQUIRED_FLAGS)
if(NOT AOTINFER_HAVE_LIBFUZZER)
  message(FATAL_ERROR
    "AOTINFER_FUZZ=ON: ${CMAKE_CXX_COMPILER} cannot link -fsanitize=fuzzer,address,undefined; install the "
    "compiler-rt runtimes (Debian: libclang-rt-14-dev)")
endif()

# -O1 -g, asserts on, whatever the build type says.
add_compile_options(
  "$<$<COMPILE_LANGUAGE:C,CXX>:-O1;-g;-fno-omit-frame-pointer;-UNDEBUG;-fsanitize=fuzzer-no-link,address,undefined;-fno-sanitize-recover=all>")
add_link_options("$<$<LINK_LANGUAGE:C,CXX>:-fsanitize=address,undefined>")
