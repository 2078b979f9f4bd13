# `starzero bench blas` and `bench step`'s tiles and head groups on the CPU: the table's shape and one-line usage errors (a few seconds).
starzero_script_test(bench_cli/blas bench_cli_test.sh TIMEOUT 120)
