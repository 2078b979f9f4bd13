# train/: checkpoints (layer checkpoint file, save, resume, consolidate), the model registry's
# shape rules, with the MLP model and real StarPU sessions (each case in its own process).
add_executable(test_train test_train.cpp)
target_link_libraries(test_train PRIVATE starzero_catch_main starzero_models starzero_train)
catch_discover_tests(test_train TEST_PREFIX "train/" PROPERTIES LABELS unit)
