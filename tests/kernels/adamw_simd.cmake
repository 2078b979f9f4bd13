# optimizers/adamw_simd: the fused CPU AdamW paths (scalar, AVX2, AVX-512) against a double
# reference, bit-identity between paths, with adamw_cpu and across threads/chunks, NaN handling.
add_executable(test_adamw_simd test_adamw_simd.cpp)
target_link_libraries(test_adamw_simd PRIVATE starzero_catch_main starzero_optimizers)
catch_discover_tests(test_adamw_simd TEST_PREFIX "adamw/" PROPERTIES LABELS unit TIMEOUT 60)
# optimizers/lr_schedule: the learning-rate schedules at hand-worked points.
add_executable(test_lr_schedule test_lr_schedule.cpp)
target_link_libraries(test_lr_schedule PRIVATE starzero_catch_main starzero_optimizers)
catch_discover_tests(test_lr_schedule TEST_PREFIX "lr_schedule/" PROPERTIES LABELS unit TIMEOUT 60)
