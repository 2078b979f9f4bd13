# `starzero-mlp`: a residual-MLP token classifier (not GPT, defined in the example program)
# trained by the ZeRO engine: proof that the engine only knows offload/model.hpp.
#   mlp_single   - one rank, 200 steps: final loss < 0.05 and accuracy 1.0 (about 1-3 s)
#   mlp_zero_np2 - 2 MPI ranks, ZeRO-0..3: losses equal single-rank training within 1e-3,
#                  same accuracy (about 1.5 min on 2 shared cores)
add_test(NAME mlp_single COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/mlp_test.sh $<TARGET_FILE:starzero-mlp> single)
set_tests_properties(mlp_single PROPERTIES TIMEOUT 60)
add_test(NAME mlp_zero_np2 COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/mlp_test.sh $<TARGET_FILE:starzero-mlp> zero_np2)
set_tests_properties(mlp_zero_np2 PROPERTIES TIMEOUT 600 LABELS mpi)
