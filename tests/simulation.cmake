# The tests of a simulation build (STARZERO_SIMULATION, included from the top CMakeLists.txt):
# starzero-sim on simulated machines (docs/simulation.md).
add_test(NAME simulation COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/simulation_test.sh $<TARGET_FILE:starzero>)
set_tests_properties(simulation PROPERTIES LABELS simulation TIMEOUT 900)
