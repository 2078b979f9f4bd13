# runtime/host_memory: pinned NUMA-local host buffers, the pageable fallback (in a forked child
# without CAP_IPC_LOCK and with RLIMIT_MEMLOCK = 64 KiB), accounting, MemAvailable.
add_executable(test_host_memory test_host_memory.cpp)
target_link_libraries(test_host_memory PRIVATE starzero_catch_main starzero_tasks starzero_runtime)
catch_discover_tests(test_host_memory TEST_PREFIX "host_memory/" PROPERTIES LABELS unit TIMEOUT 120)
