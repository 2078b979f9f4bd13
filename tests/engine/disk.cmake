# runtime/disk: the NVMe tier (tensors homed on a StarPU out-of-core disk node): round trip through
# CPU tasks and the home file, eviction under STARPU_LIMIT_CPU_MEM, file clean-up, bad directories.
add_executable(test_disk test_disk.cpp)
target_link_libraries(test_disk PRIVATE starzero_catch_main starzero_tasks starzero_runtime)
catch_discover_tests(test_disk TEST_PREFIX "disk/" PROPERTIES LABELS unit TIMEOUT 120)
