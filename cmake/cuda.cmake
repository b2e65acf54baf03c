# The CUDA backend is built whenever nvcc, cuDNN and the cudnn-frontend headers are found, so
# machines without a GPU (CI) still compile all GPU code. KILN_WITH_CUDA=OFF turns it off.
option(KILN_WITH_CUDA "Build the CUDA backend when its dependencies are found" ON)
set(KILN_CUDA_FOUND OFF)
if(NOT KILN_WITH_CUDA)
  return()
endif()

include(CheckLanguage)
check_language(CUDA)
# cuDNN: PyTorch's copy on the GPU machine (the version PyTorch itself runs), else the toolkit's
# or the system's. KILN_CUDNN_ROOT overrides.
set(KILN_CUDNN_HINTS $ENV{KILN_CUDNN_ROOT} ${KILN_CUDNN_ROOT}
    /opt/torch/.venv/lib/python3.12/site-packages/nvidia/cudnn /usr/local/cuda /usr)
find_path(KILN_CUDNN_INCLUDE cudnn.h HINTS ${KILN_CUDNN_HINTS} PATH_SUFFIXES include include/x86_64-linux-gnu
          NO_DEFAULT_PATH)
find_library(KILN_CUDNN_LIBRARY NAMES cudnn libcudnn.so.9 HINTS ${KILN_CUDNN_HINTS}
             PATH_SUFFIXES lib lib64 lib/x86_64-linux-gnu NO_DEFAULT_PATH)
find_path(KILN_CUDNN_FRONTEND_INCLUDE cudnn_frontend.h HINTS ${CMAKE_SOURCE_DIR}/third_party/cudnn_frontend/include
          NO_DEFAULT_PATH)
if(NOT CMAKE_CUDA_COMPILER OR NOT KILN_CUDNN_INCLUDE OR NOT KILN_CUDNN_LIBRARY OR NOT KILN_CUDNN_FRONTEND_INCLUDE)
  message(STATUS "kiln: CUDA backend off (nvcc: '${CMAKE_CUDA_COMPILER}', cudnn.h: '${KILN_CUDNN_INCLUDE}', "
                 "libcudnn: '${KILN_CUDNN_LIBRARY}', cudnn_frontend.h: '${KILN_CUDNN_FRONTEND_INCLUDE}')")
  return()
endif()

enable_language(CUDA)
find_package(CUDAToolkit REQUIRED)
set(CMAKE_CUDA_STANDARD 17)  # CMake 3.25 knows no CUDA20 flags for nvcc
set(CMAKE_CUDA_STANDARD_REQUIRED ON)
# nvcc's own default (sm_75 for CUDA 13) would leave Hopper to JIT-compile old PTX at load time:
# build sm_90 machine code plus compute_90 PTX (H100/H200) unless KILN_CUDA_ARCHS says otherwise.
set(KILN_CUDA_ARCHS "90" CACHE STRING "CUDA architectures to build for (CMake CUDA_ARCHITECTURES syntax)")
set(CMAKE_CUDA_ARCHITECTURES ${KILN_CUDA_ARCHS})
set(KILN_CUDA_FOUND ON)
message(STATUS "kiln: CUDA backend on (cuDNN ${KILN_CUDNN_INCLUDE}, ${KILN_CUDNN_LIBRARY})")

# Kernels (.cu) stay free of cudnn-frontend; its heavy headers are only in a few host .cpp
# files compiled by the host compiler.
file(GLOB_RECURSE KILN_CUDA_SRC CONFIGURE_DEPENDS src/ops/*_cuda.cu src/ops/*_cuda.cpp
     src/runtime/cuda/*.cu src/runtime/cuda/*.cpp)
list(FILTER KILN_CUDA_SRC EXCLUDE REGEX "_test\\.cpp$")
kiln_op_tables(cuda cuda_op_tables ${CMAKE_BINARY_DIR}/generated/op_tables_cuda.cpp KILN_CUDA_OP_TABLE_SRC)
add_library(kiln_cuda STATIC ${KILN_CUDA_SRC} ${CMAKE_BINARY_DIR}/generated/op_tables_cuda.cpp)
target_include_directories(kiln_cuda SYSTEM PUBLIC $<BUILD_INTERFACE:${KILN_CUDNN_INCLUDE}>
                           PRIVATE ${KILN_CUDNN_FRONTEND_INCLUDE})  # SYSTEM: no warnings from their headers
target_link_libraries(kiln_cuda PUBLIC kiln_ops kiln_data CUDA::cudart CUDA::cublasLt
                      $<BUILD_INTERFACE:${KILN_CUDNN_LIBRARY}> $<INSTALL_INTERFACE:kiln::cudnn>  # cmake/kiln-config.cmake.in
                      PRIVATE nlohmann_json::nlohmann_json)
target_compile_options(kiln_cuda PRIVATE $<$<COMPILE_LANGUAGE:CUDA>:--expt-relaxed-constexpr -lineinfo>)
# fmt 9's consteval format strings do not compile under nvcc; constexpr checking does.
target_compile_definitions(kiln_cuda PRIVATE $<$<COMPILE_LANGUAGE:CUDA>:FMT_USE_CONSTEXPR=1>)
# Part of every plan cache key (src/runtime/cuda/cudnn_plan_replay.cpp): a release may define a
# graph differently under the same name.
set_property(SOURCE src/runtime/cuda/cudnn_plan_replay.cpp APPEND PROPERTY COMPILE_DEFINITIONS
             KILN_VERSION="${PROJECT_VERSION}")
set_target_properties(kiln_cuda PROPERTIES CUDA_SEPARABLE_COMPILATION OFF POSITION_INDEPENDENT_CODE ON)
target_link_libraries(kiln_engine PUBLIC kiln_cuda)
include(cmake/cutlass.cmake)
include(cmake/nvjpeg.cmake)
include(cmake/nccl.cmake)
target_compile_definitions(kiln_engine PUBLIC KILN_WITH_CUDA=1)

# GPU tests (ctest label `gpu`): src/ops/*/*_gpu_test.cpp and tests/gpu/*.cpp, one executable.
if(KILN_BUILD_TESTS)
  file(GLOB_RECURSE KILN_GPU_TESTS CONFIGURE_DEPENDS src/ops/*_gpu_test.cpp tests/gpu/*.cpp)
  if(KILN_GPU_TESTS)
    add_executable(kiln_test_gpu ${KILN_GPU_TESTS})
    target_link_libraries(kiln_test_gpu PRIVATE kiln_engine GTest::gtest_main)
    target_include_directories(kiln_test_gpu PRIVATE ${CMAKE_SOURCE_DIR}/tests)  # tests/support/
    target_compile_definitions(kiln_test_gpu PRIVATE
      KILN_SOURCE_DIR="${CMAKE_SOURCE_DIR}" KILN_BINARY_DIR="${CMAKE_BINARY_DIR}")
    gtest_discover_tests(kiln_test_gpu PROPERTIES LABELS "gpu")
  endif()
endif()

# Host-side logic of the CUDA backend that needs no GPU (the plan cache file, settings, argument
# checks made before any launch, scalars computed on the host): label cpu, so CI runs it.
# src/runtime/cuda/*_test.cpp and src/ops/<family>/*_cuda_host_test.cpp.
if(KILN_BUILD_TESTS)
  file(GLOB KILN_CUDA_HOST_TESTS CONFIGURE_DEPENDS src/runtime/cuda/*_test.cpp src/ops/*/*_cuda_host_test.cpp)
  if(KILN_CUDA_HOST_TESTS)
    add_executable(kiln_test_cuda_host ${KILN_CUDA_HOST_TESTS})
    target_link_libraries(kiln_test_cuda_host PRIVATE kiln_engine GTest::gtest_main)
    target_include_directories(kiln_test_cuda_host PRIVATE ${CMAKE_SOURCE_DIR}/tests)  # tests/support/
    gtest_discover_tests(kiln_test_cuda_host DISCOVERY_TIMEOUT 60 PROPERTIES LABELS "cpu")
  endif()
endif()

# Probe of fused cuDNN graph support and speed on this GPU (the table behind docs/cudnn-support.md).
add_executable(kiln_cudnn_probe tools/cudnn_probe.cpp)
target_include_directories(kiln_cudnn_probe SYSTEM PRIVATE ${KILN_CUDNN_FRONTEND_INCLUDE})
target_link_libraries(kiln_cudnn_probe PRIVATE kiln_cuda)

add_executable(kiln_cbr_bench bench/cbr_bench.cpp)
target_link_libraries(kiln_cbr_bench PRIVATE kiln_engine)
# cudnn-frontend (in src/runtime/cuda/cudnn_*.cpp) calls NVRTC for its open-source engines: link it, or every
# executable that links kiln_cuda fails with undefined nvrtc* symbols.
target_link_libraries(kiln_cuda PUBLIC CUDA::nvrtc)

# Loop-structure variants of the BN+ReLU streaming kernels, timed against the copy ceilings.
add_executable(kiln_bn_variants_bench bench/bn_kernel_variants.cu)
set_target_properties(kiln_bn_variants_bench PROPERTIES CUDA_STANDARD 17)
target_compile_options(kiln_bn_variants_bench PRIVATE $<$<COMPILE_LANGUAGE:CUDA>:--expt-relaxed-constexpr>)
