# train/: the training-state files (train/state_files.hpp: one rank's .state file; and
# train/sharded_state.hpp: any rank count's files read piece by piece): round trips, raw layout,
# malformed files. Host-side only, with a StateLayout made by the test: no model, no StarPU session.
add_executable(test_state_files test_state_files.cpp)
target_link_libraries(test_state_files PRIVATE starzero_catch_main starzero_train)
catch_discover_tests(test_state_files TEST_PREFIX "state_files/" PROPERTIES LABELS unit)
