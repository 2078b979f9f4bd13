# The built `starzero train` and `starzero eval` end to end on the CPU (tiny models, few steps),
# in four parts (each about 3-20 s on 2 cores; `ctest -R train_cli` runs them all):
#   train  - the loss falls; seeded runs repeat exactly (fp32, bf16), another seed differs
#   resume - 5 + 5 resumed steps equal 10 steps bit for bit; llm.c checkpoint headers (v3, v5);
#            `starzero eval` on a token shard and on text
#   errors - one-line errors with exit code 2 that leave the --checkpoint-out file alone
#   trace  - --trace DIR leaves a paje.trace that ViTE reads without errors
foreach(part train resume errors trace)
  add_test(NAME train_cli/${part}
           COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/train_cli_test.sh $<TARGET_FILE:starzero> ${part})
  set_tests_properties(train_cli/${part} PROPERTIES TIMEOUT 180)
endforeach()
# --metrics FILE.jsonl (exact losses, appended on resume) and `starzero plot` (gnuplot SVG).
starzero_script_test(metrics metrics_test.sh TIMEOUT 180)
# Checkpoint sets: step folders, latest, keep, --resume, stale partial folders, a full disk.
starzero_script_test(checkpoint_sets checkpoint_sets_test.sh TIMEOUT 300)
# kill -9 at random moments while saving a set every step, then resume: losses exact, final model
# byte-identical, nothing left behind (scripts/kill-test.sh; the full 100 + 20 kills: see its header).
starzero_script_test(kill_resume ${PROJECT_SOURCE_DIR}/scripts/kill-test.sh ARGS 5 TIMEOUT 300)
starzero_script_test(kill_resume_np2 ${PROJECT_SOURCE_DIR}/scripts/kill-test.sh ARGS 2 2 TIMEOUT 400 LABELS mpi)
# Non-finite gradient norms: the update skipped, warned, counted, never saved.
starzero_script_test(nonfinite_gradients nonfinite_test.sh TIMEOUT 300 LABELS mpi)
# --deepspeed-config: a DeepSpeed config equals its flags; DeepSpeed's own sample; errors.
starzero_script_test(deepspeed_config deepspeed_config_test.sh TIMEOUT 300 LABELS mpi)
# --watchdog: a hung task, a stopped rank (SIGSTOP under mpirun): reports and a non-zero exit.
starzero_script_test(watchdog watchdog_test.sh TIMEOUT 300 LABELS mpi)
# --recompute none|selective|full: bitwise identical training, activation bytes = the formula.
starzero_script_test(recompute recompute_test.sh TIMEOUT 600 LABELS mpi)
# --head-groups N: attention tasks per (tile, head group); bitwise identical training for every count.
starzero_script_test(head_groups head_groups_test.sh TIMEOUT 600)
# --progress auto|bar|lines: bar frames only on a terminal without a launcher (or forced), one
# line per step in files and under mpirun; a bad value exits 2.
starzero_script_test(train_progress progress_test.sh ARGS local TIMEOUT 300)
starzero_script_test(train_progress_mpirun progress_test.sh ARGS mpirun TIMEOUT 300 LABELS mpi)
# --tokenizer FILE: a token model's sample decoded by a tokenizer.json or llm.c's tokenizer; bad
# files, one too small and --prompt with it exit 2.
starzero_script_test(train_tokenizer tokenizer_test.sh TIMEOUT 300)
