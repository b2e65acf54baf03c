# oneDNN for the CPU backend's convolutions (src/ops/conv/conv_onednn_cpu.cpp), from Debian's
# libdnnl-dev (scripts/setup.sh installs it). Optional: without it, or with -DKILN_WITH_ONEDNN=OFF,
# kiln's own CPU kernels run everything. PyPI's onednn wheels are built for SYCL and TBB, which
# neither machine has; Debian's is built on OpenMP, whose threads kiln limits to one per caller.
option(KILN_WITH_ONEDNN "Run the CPU convolutions on oneDNN where libdnnl-dev is found" ON)
set(KILN_ONEDNN_FOUND OFF)
if(KILN_WITH_ONEDNN)
  find_package(dnnl CONFIG QUIET)
  if(dnnl_FOUND)
    set(KILN_ONEDNN_FOUND ON)
    # libgomp for omp_set_num_threads alone: no -fopenmp, which would put Eigen's GEMM on OpenMP too.
    target_link_libraries(kiln_ops PRIVATE DNNL::dnnl gomp)
    target_compile_definitions(kiln_ops PRIVATE KILN_WITH_ONEDNN=1)
    target_compile_definitions(kiln_core PRIVATE KILN_WITH_ONEDNN=1)  # core/cpu_kernels.cpp: onednn_built()
    message(STATUS "kiln: oneDNN ${dnnl_VERSION} for the CPU convolutions")
  else()
    message(STATUS "kiln: oneDNN not found (libdnnl-dev): the CPU convolutions run on kiln's own kernels")
  endif()
else()
  message(STATUS "kiln: oneDNN off (KILN_WITH_ONEDNN=OFF)")
endif()
