# ZeRO stages 0-3 across real MPI ranks: equality with single-rank training, memory and
# collective bytes against the formulas, the ZeRO-3 prefetch window, and a rank that dies.
foreach(np 2 4)
  starzero_script_test(zero_np${np} zero_test.sh ARGS ${np} TIMEOUT 600 LABELS mpi)
endforeach()
starzero_script_test(zero_rank_dies zero_kill_test.sh TIMEOUT 180 LABELS mpi)
starzero_script_test(zero_checkpoints zero_checkpoint_test.sh TIMEOUT 300 LABELS mpi)
