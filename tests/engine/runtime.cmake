# runtime/ and tasks/: StarPU session, topology, task graphs, traces.
add_executable(test_runtime test_session.cpp test_graph.cpp)
target_link_libraries(test_runtime PRIVATE starzero_catch_main starzero_tasks starzero_runtime)
catch_discover_tests(test_runtime PROPERTIES LABELS unit TIMEOUT 120)

