# Every external part comes from the system (Debian packages + the CUDA toolkit); setup.sh
# installs what is missing. Each find says what to install when it fails.
find_package(nlohmann_json 3.10 REQUIRED)
find_package(Threads REQUIRED)

# Only cuda.h is needed (types and enums): the runtime opens libcuda with dlopen and links nothing.
set(AOTINFER_CUDA_HOME "/usr/local/cuda" CACHE PATH "CUDA toolkit used for cuda.h and nvcc")
find_path(AOTINFER_CUDA_INCLUDE_DIR cuda.h HINTS ${AOTINFER_CUDA_HOME}/include REQUIRED
          DOC "CUDA toolkit include directory (install the CUDA 13 toolkit or set AOTINFER_CUDA_HOME)")
find_program(AOTINFER_NVCC nvcc HINTS ${AOTINFER_CUDA_HOME}/bin
             DOC "nvcc used by generated package builds")

if(AOTINFER_BUILD_GENERATOR)
  # ClangConfig carries no version: LLVM's pins it (Debian: libclang-14-dev, llvm-14-dev).
  find_package(LLVM 14 REQUIRED CONFIG HINTS /usr/lib/llvm-14/lib/cmake/llvm)
  find_package(Clang REQUIRED CONFIG HINTS ${LLVM_DIR}/../clang NO_DEFAULT_PATH)
  # Clang's builtin headers (stddef.h, the CUDA wrappers) live in its resource directory.
  set(AOTINFER_CLANG_RESOURCE_DIR
      "${LLVM_LIBRARY_DIR}/clang/${LLVM_PACKAGE_VERSION}" CACHE PATH "Clang resource directory")
  # seal reads each fatbin's cubins, which nvcc compresses with zstd (Debian: libzstd-dev).
  find_path(AOTINFER_ZSTD_INCLUDE_DIR zstd.h REQUIRED DOC "zstd headers (install libzstd-dev)")
  find_library(AOTINFER_ZSTD_LIBRARY zstd REQUIRED DOC "zstd library (install libzstd-dev)")
  add_library(zstd::zstd UNKNOWN IMPORTED)
  set_target_properties(zstd::zstd PROPERTIES IMPORTED_LOCATION "${AOTINFER_ZSTD_LIBRARY}"
                                              INTERFACE_INCLUDE_DIRECTORIES "${AOTINFER_ZSTD_INCLUDE_DIR}")
endif()

if(AOTINFER_BUILD_TESTS)
  find_package(Catch2 REQUIRED)  # 2.x or 3.x: tests/catch.hpp bridges them
endif()
