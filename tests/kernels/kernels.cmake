# tasks/nn_kernels: the CPU GPT-2 kernels against double-precision references and finite
# differences, float and bf16 storage.
add_executable(test_gpt_kernels test_gpt_kernels.cpp)
target_link_libraries(test_gpt_kernels PRIVATE starzero_catch_main starzero_tasks)
# The prefix keeps every test case selectable with `ctest -R kernels`.
catch_discover_tests(test_gpt_kernels TEST_PREFIX "kernels/" PROPERTIES LABELS unit TIMEOUT 60)
# runtime/codelet and the tasks/nn declarations: FLOP counts, the handle-count check of submit(),
# a declared codelet submitted end to end on CPU workers; the FLOP and byte counts of every GPT-2
# and Llama 3 op codelet against their written formulas (test_codelet_costs.cpp).
add_executable(test_codelets test_codelets.cpp test_codelet_costs.cpp)
target_link_libraries(test_codelets PRIVATE starzero_catch_main starzero_tasks)
catch_discover_tests(test_codelets TEST_PREFIX "kernels/codelets/" PROPERTIES LABELS unit TIMEOUT 60)
# tasks/attention_kernel: --attention's parsing and resolution, and cuDNN's workspace estimate in
# the memory plan (no GPU, no cuDNN needed).
add_executable(test_attention_kernel test_attention_kernel.cpp)
target_link_libraries(test_attention_kernel PRIVATE starzero_catch_main starzero_tasks starzero_offload)
catch_discover_tests(test_attention_kernel TEST_PREFIX "kernels/attention/" PROPERTIES LABELS unit TIMEOUT 60)
