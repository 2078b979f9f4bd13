# The tests of a simulation build (STARZERO_SIMGRID, included from the top CMakeLists.txt):
# starzero-sim on simulated machines (docs/sim.md).
add_test(NAME sim COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/sim_test.sh $<TARGET_FILE:starzero>)
set_tests_properties(sim PROPERTIES LABELS sim TIMEOUT 900)
# Deterministic properties: simulated ranks and their collectives, PCIe bytes against the plan, GPU
# memory against the platform's, a model too large refused, the committed calibration.
add_test(NAME sim_properties COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/sim_properties_test.sh $<TARGET_FILE:starzero>)
set_tests_properties(sim_properties PROPERTIES LABELS sim TIMEOUT 900)
# Placement with a GPU: no model compute task on a CPU worker by default, some with --cpu-compute on.
add_test(NAME sim_placement COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/placement_test.sh $<TARGET_FILE:starzero>)
set_tests_properties(sim_placement PROPERTIES LABELS sim TIMEOUT 300)
