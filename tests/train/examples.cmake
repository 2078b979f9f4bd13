# examples/: every example program is built and run. train_gpt trains `tiny` for 40 steps on this
# checkout's README and exits 0 only when the loss fell (a few seconds on 2 cores).
add_test(NAME examples/train_gpt COMMAND train_gpt ${PROJECT_SOURCE_DIR}/README.md 40)
set_tests_properties(examples/train_gpt PROPERTIES TIMEOUT 120 PASS_REGULAR_EXPRESSION "loss [0-9.]+ -> [0-9.]+ in 40 steps")
