# tasks/nn_llama_kernels: the CPU Llama 3 kernels (RMSNorm, RoPE, SwiGLU, grouped-query attention)
# against double-precision references and finite differences, float and bf16 storage.
add_executable(test_llama_kernels test_llama_kernels.cpp)
target_link_libraries(test_llama_kernels PRIVATE starzero_catch_main starzero_tasks)
# The prefix keeps every test case selectable with `ctest -R kernels`.
catch_discover_tests(test_llama_kernels TEST_PREFIX "kernels/llama/" PROPERTIES LABELS unit TIMEOUT 60)
# The CUDA Llama kernels against the CPU ones. Built whenever CUDA is on, so it always compiles; it
# needs an NVIDIA GPU to pass (without one it fails, saying why), so its CTest entry only exists
# with -DSTARZERO_GPU_TESTS=ON (scripts/gpu-check.sh sets it).
if(STARZERO_WITH_CUDA)
  option(STARZERO_GPU_TESTS "Register tests that need a CUDA GPU" OFF)
  add_executable(test_llama_kernels_cuda test_llama_kernels_cuda.cpp)
  target_link_libraries(test_llama_kernels_cuda PRIVATE starzero_catch_main starzero_tasks CUDA::cudart CUDA::cublas)
  if(STARZERO_GPU_TESTS)
    add_test(NAME kernels_llama_cuda COMMAND test_llama_kernels_cuda)
    set_tests_properties(kernels_llama_cuda PROPERTIES TIMEOUT 300 LABELS "cuda;gpu")
  endif()
endif()
