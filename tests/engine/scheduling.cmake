# Scheduling: the critical-path priority scheme on hand-made graphs and a real GPT step
# (test_priorities), and `--sched` / `--priorities` / policy plugins end to end (scheduling_test.sh:
# every policy gives the same checkpoint, priorities in tasks.rec, ZeRO-3 gathers on 2 ranks).
add_executable(test_priorities test_priorities.cpp)
target_link_libraries(test_priorities PRIVATE starzero_catch_main starzero_models starzero_train)
target_compile_definitions(test_priorities PRIVATE STARZERO_SOURCE_DIR="${PROJECT_SOURCE_DIR}")
catch_discover_tests(test_priorities PROPERTIES LABELS unit TIMEOUT 120)

add_test(NAME scheduling/cli
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/scheduling_test.sh $<TARGET_FILE:starzero>
                 $<TARGET_FILE:central_priority_policy>)
set_tests_properties(scheduling/cli PROPERTIES TIMEOUT 300)

starzero_script_test(scheduling/sweep sweep_test.sh TIMEOUT 300 LABELS mpi)
