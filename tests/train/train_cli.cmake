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
add_test(NAME metrics COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/metrics_test.sh $<TARGET_FILE:starzero>)
set_tests_properties(metrics PROPERTIES TIMEOUT 180)
# Checkpoint sets: step folders, latest, keep, --resume, stale partial folders, a full disk.
add_test(NAME checkpoint_sets COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/checkpoint_sets_test.sh $<TARGET_FILE:starzero>)
set_tests_properties(checkpoint_sets PROPERTIES TIMEOUT 300)
# kill -9 at random moments while saving a set every step, then resume: losses exact, final model
# byte-identical, nothing left behind (scripts/kill-test.sh; the full 100 + 20 kills: see its header).
add_test(NAME kill_resume COMMAND bash ${PROJECT_SOURCE_DIR}/scripts/kill-test.sh $<TARGET_FILE:starzero> 5)
set_tests_properties(kill_resume PROPERTIES TIMEOUT 300)
add_test(NAME kill_resume_np2 COMMAND bash ${PROJECT_SOURCE_DIR}/scripts/kill-test.sh $<TARGET_FILE:starzero> 2 2)
set_tests_properties(kill_resume_np2 PROPERTIES TIMEOUT 400 LABELS mpi)
# Non-finite gradient norms: the update skipped, warned, counted, never saved.
add_test(NAME nonfinite_gradients COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/nonfinite_test.sh $<TARGET_FILE:starzero>)
set_tests_properties(nonfinite_gradients PROPERTIES TIMEOUT 300 LABELS mpi)
# --deepspeed-config: a DeepSpeed config equals its flags; DeepSpeed's own sample; errors.
add_test(NAME deepspeed_config COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/deepspeed_config_test.sh $<TARGET_FILE:starzero>)
set_tests_properties(deepspeed_config PROPERTIES TIMEOUT 300 LABELS mpi)
# --watchdog: a hung task, a stopped rank (SIGSTOP under mpirun): reports and a non-zero exit.
add_test(NAME watchdog COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/watchdog_test.sh $<TARGET_FILE:starzero>)
set_tests_properties(watchdog PROPERTIES TIMEOUT 300 LABELS mpi)
# --recompute none|selective|full: bitwise identical training, activation bytes = the formula.
add_test(NAME recompute COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/recompute_test.sh $<TARGET_FILE:starzero>)
set_tests_properties(recompute PROPERTIES TIMEOUT 600 LABELS mpi)
# --head-groups N: attention tasks per (tile, head group); bitwise identical training for every count.
add_test(NAME head_groups COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/head_groups_test.sh $<TARGET_FILE:starzero>)
set_tests_properties(head_groups PROPERTIES TIMEOUT 600)
# --progress auto|bar|lines: bar frames only on a terminal without a launcher (or forced), one
# line per step in files and under mpirun; a bad value exits 2.
add_test(NAME train_progress COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/progress_test.sh $<TARGET_FILE:starzero> local)
set_tests_properties(train_progress PROPERTIES TIMEOUT 300)
add_test(NAME train_progress_mpirun COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/progress_test.sh $<TARGET_FILE:starzero> mpirun)
set_tests_properties(train_progress_mpirun PROPERTIES TIMEOUT 300 LABELS mpi)
# --tokenizer FILE: a token model's sample decoded by a tokenizer.json or llm.c's tokenizer; bad
# files, one too small and --prompt with it exit 2.
add_test(NAME train_tokenizer COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/tokenizer_test.sh $<TARGET_FILE:starzero>)
set_tests_properties(train_tokenizer PROPERTIES TIMEOUT 300)
