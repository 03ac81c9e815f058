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
endif()

if(AOTINFER_BUILD_TESTS)
  find_package(Catch2 REQUIRED)  # 2.x or 3.x: tests/catch.hpp bridges them
endif()
