# ZeRO-Offload: offloaded equals plain training (CPU, NVMe tier), placement report, the pinned
# fallback, the delayed update and impossible configurations.
add_test(NAME offload COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/offload_test.sh $<TARGET_FILE:starzero>)
set_tests_properties(offload PROPERTIES TIMEOUT 900 LABELS mpi)
# --speculative-update: bit-identical to the synchronous update (clipped and unclipped steps, bf16,
# accumulation, 2 ranks at ZeRO-1/3, a NaN step, resume), its graph, counts and bad input.
add_test(NAME speculative COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/speculative_test.sh $<TARGET_FILE:starzero>)
set_tests_properties(speculative PROPERTIES TIMEOUT 900 LABELS mpi)
# The optimizer state split between device and host (--offload-optimizer-fraction): bitwise equal
# to all-CPU AdamW, the layers of the rule in the banner and the placement report, bad values.
add_test(NAME offload_fraction COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/offload_fraction_test.sh $<TARGET_FILE:starzero>)
set_tests_properties(offload_fraction PROPERTIES TIMEOUT 900 LABELS mpi)
# One rank with the whole model on the host (--offload-params cpu at any stage): identical training,
# the device windows against the planner.
add_test(NAME one_rank_offload COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/one_rank_offload_test.sh $<TARGET_FILE:starzero>)
set_tests_properties(one_rank_offload PROPERTIES TIMEOUT 600 LABELS mpi)
