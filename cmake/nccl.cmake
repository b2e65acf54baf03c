# Data-parallel training over NCCL (src/dist/*_nccl.cpp) joins the engine where CUDA and NCCL are found:
# the copy scripts/setup.sh unpacks into third_party/nccl, PyTorch's on the GPU machine, or the
# system's. Without it join_process_group refuses with the fix (process_group_unavailable.cpp,
# added in CMakeLists.txt).
set(KILN_NCCL_HINTS $ENV{KILN_NCCL_ROOT} ${KILN_NCCL_ROOT} ${CMAKE_SOURCE_DIR}/third_party/nccl
    /opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl /usr)
find_path(KILN_NCCL_INCLUDE nccl.h HINTS ${KILN_NCCL_HINTS} PATH_SUFFIXES include NO_DEFAULT_PATH)
find_library(KILN_NCCL_LIBRARY NAMES nccl libnccl.so.2 HINTS ${KILN_NCCL_HINTS}
             PATH_SUFFIXES lib lib64 lib/x86_64-linux-gnu NO_DEFAULT_PATH)
set(KILN_NCCL_FOUND OFF)
if(NOT KILN_NCCL_INCLUDE OR NOT KILN_NCCL_LIBRARY)
  message(STATUS "kiln: data parallel off (nccl.h: '${KILN_NCCL_INCLUDE}', libnccl: '${KILN_NCCL_LIBRARY}')")
  return()
endif()
set(KILN_NCCL_FOUND ON)
message(STATUS "kiln: data parallel on (${KILN_NCCL_LIBRARY})")
file(GLOB KILN_NCCL_SRC CONFIGURE_DEPENDS src/dist/*_nccl.cpp)
# Into the engine beside the rendezvous it uses (a static kiln_cuda, linked after the engine, could
# not reach back into it).
target_sources(kiln_engine PRIVATE ${KILN_NCCL_SRC})
target_include_directories(kiln_engine SYSTEM PRIVATE ${KILN_NCCL_INCLUDE})
target_link_libraries(kiln_engine PUBLIC $<BUILD_INTERFACE:${KILN_NCCL_LIBRARY}> $<INSTALL_INTERFACE:kiln::nccl>)
