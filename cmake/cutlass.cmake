# kiln's own Hopper kernels on CUTLASS (src/ops/*/*_cutlass.cu): wgmma and TMA need sm_90a code,
# so they build as an object library of their own for that architecture, linked into kiln_cuda.
# CUTLASS's headers come from NVIDIA's PyPI wheel (scripts/setup.sh unpacks them into
# third_party/cutlass/include; KILN_CUTLASS_INCLUDE overrides). Without them, or when
# KILN_CUDA_ARCHS does not include 90, the same files build without the kernels
# (KILN_WITH_CUTLASS=0), which then report themselves unsupported.
find_path(KILN_CUTLASS_INCLUDE cutlass/conv/collective/collective_builder.hpp
          HINTS $ENV{KILN_CUTLASS_INCLUDE} ${CMAKE_SOURCE_DIR}/third_party/cutlass/include NO_DEFAULT_PATH)
file(GLOB_RECURSE KILN_CUTLASS_SRC CONFIGURE_DEPENDS src/ops/*_cutlass.cu)
add_library(kiln_cutlass OBJECT ${KILN_CUTLASS_SRC})
target_link_libraries(kiln_cutlass PRIVATE CUDA::cudart fmt::fmt)
target_include_directories(kiln_cutlass PRIVATE ${CMAKE_SOURCE_DIR}/src ${CMAKE_SOURCE_DIR}/include
                           ${CMAKE_BINARY_DIR}/generated)
target_compile_definitions(kiln_cutlass PRIVATE FMT_USE_CONSTEXPR=1 NDEBUG)
set_target_properties(kiln_cutlass PROPERTIES POSITION_INDEPENDENT_CODE ON CUDA_STANDARD 17)
if(KILN_CUTLASS_INCLUDE AND "90" IN_LIST KILN_CUDA_ARCHS)
  message(STATUS "kiln: CUTLASS kernels on (${KILN_CUTLASS_INCLUDE})")
  target_include_directories(kiln_cutlass SYSTEM PRIVATE ${KILN_CUTLASS_INCLUDE})
  target_compile_definitions(kiln_cutlass PRIVATE KILN_WITH_CUTLASS=1)
  target_compile_options(kiln_cutlass PRIVATE --expt-relaxed-constexpr -lineinfo)
  set_target_properties(kiln_cutlass PROPERTIES CUDA_ARCHITECTURES 90a)
else()
  message(STATUS "kiln: CUTLASS kernels off (headers: '${KILN_CUTLASS_INCLUDE}', architectures: ${KILN_CUDA_ARCHS})")
  target_compile_definitions(kiln_cutlass PRIVATE KILN_WITH_CUTLASS=0)
endif()
target_sources(kiln_cuda PRIVATE $<TARGET_OBJECTS:kiln_cutlass>)
