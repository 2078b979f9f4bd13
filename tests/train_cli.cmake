# The built `starzero train` and `starzero eval` end to end on the CPU (tiny models, few steps):
# the loss falls, seeded runs repeat exactly, 5 + 5 resumed steps equal 10 steps bit for bit,
# llm.c checkpoint headers, eval on a token shard, one-line errors with exit code 2 that leave
# the --checkpoint-out file alone, and a --trace that ViTE reads.
add_test(NAME train_cli
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/train_cli_test.sh $<TARGET_FILE:starzero>)
set_tests_properties(train_cli PROPERTIES TIMEOUT 300)
