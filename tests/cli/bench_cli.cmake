# `starzero bench blas` and `bench step`'s tiles and head groups on the CPU: the table's shape and one-line usage errors (a few seconds).
add_test(NAME bench_cli/blas COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/bench_cli_test.sh $<TARGET_FILE:starzero>)
set_tests_properties(bench_cli/blas PROPERTIES TIMEOUT 120)
