# runtime/ and tasks/: StarPU session, topology, task graphs, traces.
add_executable(test_runtime test_session.cpp test_graph.cpp)
target_link_libraries(test_runtime PRIVATE starzero_catch_main starzero_tasks starzero_runtime)
catch_discover_tests(test_runtime PROPERTIES LABELS unit TIMEOUT 120)

# offload/step_walk: the step's walks and the unshard/reshard transitions, on a model that submits nothing.
add_executable(test_step_walk test_step_walk.cpp)
target_link_libraries(test_step_walk PRIVATE starzero_catch_main starzero_offload)
catch_discover_tests(test_step_walk PROPERTIES LABELS unit TIMEOUT 120)
