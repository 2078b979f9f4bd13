# `starzero train --model mlp`: a residual-MLP token classifier (models/mlp.*, not GPT) trained by
# the same engine and trainer: proof that adding a model touches only models/.
#   mlp_single   - one rank, 200 steps: validation loss over all 64 tokens < 0.05 and accuracy
#                  1.0; --offload-optimizer cpu gives the same losses; save at step 100 and
#                  resume gives the uninterrupted run's losses and checkpoint (about 5 s)
#   mlp_zero_np2 - 2 MPI ranks, ZeRO-0..3: losses equal single-rank training within 1e-3, same
#                  accuracy; ZeRO-3 on 2 ranks saves and resumes exactly (about 2 min on 2 cores)
starzero_script_test(mlp_single mlp_test.sh ARGS single TIMEOUT 120)
starzero_script_test(mlp_zero_np2 mlp_test.sh ARGS zero_np2 TIMEOUT 600 LABELS mpi)
