# The safetensors reader and writer (models/safetensors.hpp).
add_executable(test_safetensors test_safetensors.cpp)
target_link_libraries(test_safetensors PRIVATE starzero_catch_main starzero_models)
catch_discover_tests(test_safetensors TEST_PREFIX "models/" PROPERTIES LABELS unit)
