# CUDA kernels against the CPU ones (tasks/nn_kernels.hpp, and the AdamW of optimizers/). The executable is built whenever CUDA
# is on, so it always compiles; it needs an NVIDIA GPU to pass (without one it fails, saying why),
# so its CTest entry only exists with -DSTARZERO_GPU_TESTS=ON (scripts/gpu-check.sh sets it).
if(STARZERO_WITH_CUDA)
  option(STARZERO_GPU_TESTS "Register tests that need a CUDA GPU" OFF)
  add_executable(test_gpt_kernels_cuda test_gpt_kernels_cuda.cpp)
  target_link_libraries(test_gpt_kernels_cuda PRIVATE starzero_catch_main starzero_tasks starzero_optimizers CUDA::cudart CUDA::cublas)
  if(STARZERO_GPU_TESTS)
    add_test(NAME kernels_cuda COMMAND test_gpt_kernels_cuda)
    set_tests_properties(kernels_cuda PROPERTIES TIMEOUT 300 LABELS "cuda;gpu")
  endif()
endif()

# cuDNN's flash attention (tasks/attention_cudnn.hpp) against a double-precision reference and
# the own CUDA kernel, and both kernels' timings at gpt-13B's shape (written as
# $OUT_DIR/attention_calibration.json). Built whenever cuDNN is found; registered with the GPU tests.
if(STARZERO_WITH_CUDNN)
  add_executable(test_attention_cudnn test_attention_cudnn.cpp)
  target_link_libraries(test_attention_cudnn PRIVATE starzero_catch_main starzero_tasks CUDA::cudart)
  if(STARZERO_GPU_TESTS)
    add_test(NAME kernels_attention_cudnn COMMAND test_attention_cudnn)
    set_tests_properties(kernels_attention_cudnn PROPERTIES TIMEOUT 300 LABELS "cuda;gpu")
  endif()
endif()
