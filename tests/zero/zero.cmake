# ZeRO stages 0-3 across real MPI ranks: equality with single-rank training, memory and
# collective bytes against the formulas, the ZeRO-3 prefetch window, and a rank that dies.
foreach(np 2 4)
  add_test(NAME zero_np${np} COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/zero_test.sh $<TARGET_FILE:starzero> ${np})
  set_tests_properties(zero_np${np} PROPERTIES TIMEOUT 600 LABELS mpi)
endforeach()
add_test(NAME zero_rank_dies COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/zero_kill_test.sh $<TARGET_FILE:starzero>)
set_tests_properties(zero_rank_dies PROPERTIES TIMEOUT 180 LABELS mpi)
add_test(NAME zero_checkpoints COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/zero_checkpoint_test.sh $<TARGET_FILE:starzero>)
set_tests_properties(zero_checkpoints PROPERTIES TIMEOUT 300 LABELS mpi)
