# offload/planner, the per-layer plan it shares with the engine, the host plan of offload runs,
# and the `starzero plan` command line. The flag parser (apps/cli.cpp) is compiled straight
# into the test: apps/ has no library target for it. The GPT footprints come from
# starzero_models (models/gpt_layout.hpp).
add_executable(test_planner test_planner.cpp ${PROJECT_SOURCE_DIR}/apps/cli.cpp)
target_include_directories(test_planner PRIVATE ${PROJECT_SOURCE_DIR})
target_link_libraries(test_planner PRIVATE starzero_catch_main starzero_models starzero_offload)
# The prefix keeps every test case selectable with `ctest -R plan`.
catch_discover_tests(test_planner TEST_PREFIX "planner/" PROPERTIES LABELS unit)

# The step bound (sim/step_bound.hpp), the planner's work per step and rates per rank
# (offload/step_work.hpp) and the models' FLOP counts, against figures written out in the test.
add_executable(test_step_bound test_step_bound.cpp)
target_link_libraries(test_step_bound PRIVATE starzero_catch_main starzero_models starzero_offload)
catch_discover_tests(test_step_bound TEST_PREFIX "step_bound/" PROPERTIES LABELS unit)

# The built `starzero plan` end to end: the seeds' 7B table, one-line errors with exit code 2,
# valid JSON, the 70B on 4 x 80 GB verdict.
add_test(NAME plan_cli
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/plan_cli_test.sh $<TARGET_FILE:starzero>)
set_tests_properties(plan_cli PROPERTIES TIMEOUT 400)

# The GPU cost classes (runtime/gpu_cost.hpp) and every codelet's declaration of one, against the
# published and hand-counted figures written out in the test.
add_executable(test_gpu_cost test_gpu_cost.cpp)
target_link_libraries(test_gpu_cost PRIVATE starzero_catch_main starzero_tasks starzero_sim_platform)
catch_discover_tests(test_gpu_cost TEST_PREFIX "gpu_cost/" PROPERTIES LABELS unit)
