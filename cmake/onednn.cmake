# oneDNN for the CPU backend's convolutions (src/ops/conv/conv_onednn_cpu.cpp): version 3, from
# Intel's PyPI wheels built on GNU OpenMP (onednn-cpu-gomp, onednn-devel-cpu-gomp), which
# scripts/setup.sh unpacks into third_party/onednn. Why these: oneDNN 3 has brgemm kernels for the
# backward convolutions where Debian's libdnnl-dev (2.6) runs older direct ones; the newer PyPI
# `onednn` wheels are built for SYCL and TBB, whose threads could not be kiln's. Optional: without
# it, or with -DKILN_WITH_ONEDNN=OFF, kiln's own CPU kernels run everything.
option(KILN_WITH_ONEDNN "Run the CPU convolutions on oneDNN 3 where it is found (scripts/setup.sh fetches it)" ON)
set(KILN_ONEDNN_FOUND OFF)
if(KILN_WITH_ONEDNN)
  find_package(dnnl 3 CONFIG QUIET HINTS ${CMAKE_SOURCE_DIR}/third_party/onednn)
  if(NOT dnnl_FOUND AND dnnl_DIR)  # a build configured before kept Debian's 2.x in its cache: look again
    unset(dnnl_DIR CACHE)
    find_package(dnnl 3 CONFIG QUIET HINTS ${CMAKE_SOURCE_DIR}/third_party/onednn)
  endif()
  if(dnnl_FOUND)
    set(KILN_ONEDNN_FOUND ON)
    # libgomp for omp_set_num_threads alone: no -fopenmp, which would put Eigen's GEMM on OpenMP too.
    target_link_libraries(kiln_ops PRIVATE DNNL::dnnl gomp)
    target_compile_definitions(kiln_ops PRIVATE KILN_WITH_ONEDNN=1)
    target_compile_definitions(kiln_core PRIVATE KILN_WITH_ONEDNN=1)  # core/cpu_kernels.cpp: onednn_built()
    message(STATUS "kiln: oneDNN ${dnnl_VERSION} for the CPU convolutions (${dnnl_DIR})")
  else()
    message(STATUS "kiln: oneDNN 3 not found (scripts/setup.sh puts it in third_party/onednn): "
                   "the CPU convolutions run on kiln's own kernels")
  endif()
else()
  message(STATUS "kiln: oneDNN off (KILN_WITH_ONEDNN=OFF)")
endif()
