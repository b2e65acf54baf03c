# The GPU JPEG decode path (src/data/gpu_decode/, --decode gpu) joins the CUDA backend where nvJPEG
# is found: the toolkit's, PyTorch's copy on the GPU machine, or the PyPI wheel scripts/setup.sh
# unpacks into third_party/nvjpeg. Without it, --decode gpu is refused with the fix
# (gpu_decode_unavailable.cpp, added in CMakeLists.txt).
set(KILN_NVJPEG_HINTS $ENV{KILN_NVJPEG_ROOT} ${KILN_NVJPEG_ROOT} ${CMAKE_SOURCE_DIR}/third_party/nvjpeg
    ${CUDAToolkit_LIBRARY_ROOT} /opt/torch/.venv/lib/python3.12/site-packages/nvidia/cu13 /usr/local/cuda)
find_path(KILN_NVJPEG_INCLUDE nvjpeg.h HINTS ${KILN_NVJPEG_HINTS} PATH_SUFFIXES include NO_DEFAULT_PATH)
find_library(KILN_NVJPEG_LIBRARY NAMES nvjpeg libnvjpeg.so.13 HINTS ${KILN_NVJPEG_HINTS} PATH_SUFFIXES lib lib64
             NO_DEFAULT_PATH)
set(KILN_NVJPEG_FOUND OFF)
if(NOT KILN_NVJPEG_INCLUDE OR NOT KILN_NVJPEG_LIBRARY)
  message(STATUS "kiln: GPU JPEG decoding off (nvjpeg.h: '${KILN_NVJPEG_INCLUDE}', libnvjpeg: '${KILN_NVJPEG_LIBRARY}')")
  return()
endif()
set(KILN_NVJPEG_FOUND ON)
message(STATUS "kiln: GPU JPEG decoding on (${KILN_NVJPEG_LIBRARY})")
file(GLOB KILN_GPU_DECODE_SRC CONFIGURE_DEPENDS src/data/gpu_decode/*.cu src/data/gpu_decode/*.cpp)
list(FILTER KILN_GPU_DECODE_SRC EXCLUDE REGEX "_unavailable\\.cpp$")
target_sources(kiln_cuda PRIVATE ${KILN_GPU_DECODE_SRC})
target_include_directories(kiln_cuda SYSTEM PRIVATE ${KILN_NVJPEG_INCLUDE})
target_link_libraries(kiln_cuda PUBLIC $<BUILD_INTERFACE:${KILN_NVJPEG_LIBRARY}> $<INSTALL_INTERFACE:kiln::nvjpeg>)
