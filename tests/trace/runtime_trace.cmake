# runtime/: StarPU's FxT traces of a session (tasks.rec, paje.trace) and what the engine reads back.
add_executable(test_trace test_trace.cpp)
target_link_libraries(test_trace PRIVATE starzero_catch_main starzero_tasks starzero_runtime)
catch_discover_tests(test_trace PROPERTIES LABELS unit TIMEOUT 300)
