# The tests of a simulation build (STARZERO_SIMULATION, included from the top CMakeLists.txt):
# starzero-sim on simulated machines (docs/simulation.md).
add_test(NAME simulation COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/simulation_test.sh $<TARGET_FILE:starzero>)
set_tests_properties(simulation PROPERTIES LABELS simulation TIMEOUT 900)
# Deterministic properties: simulated ranks and their collectives, PCIe bytes against the plan, GPU
# memory against the platform's, a model too large refused, the committed calibration.
add_test(NAME simulation_properties COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/simulation_properties_test.sh $<TARGET_FILE:starzero>)
set_tests_properties(simulation_properties PROPERTIES LABELS simulation TIMEOUT 900)
# Placement with a GPU: no model compute task on a CPU worker by default, some with --cpu-compute on.
add_test(NAME simulation_placement COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/placement_test.sh $<TARGET_FILE:starzero>)
set_tests_properties(simulation_placement PROPERTIES LABELS simulation TIMEOUT 300)
