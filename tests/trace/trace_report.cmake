# profile/: the `starzero trace` report.
#   trace_report/*  - task kinds, intervals, hand-written trace files (critical path, busy/overhead
#                     time, RAM/GPU/DISK links, bad files) and a traced busy-wait task graph with
#                     known durations; its own executable, as StarPU writes one trace per process
#   trace_report_cli   - `starzero trace` on a 3-step traced tiny run: its busy times against
#                     tasks.rec read by Python, the JSON keys, --svg through gnuplot, ViTE, errors
#   trace_report_ranks - the same run on 2 MPI ranks: {"ranks": [...]} and rank sections
#   trace_perfetto_cli / trace_perfetto_ranks - `starzero trace --perfetto` on such runs (one rank
#                     and NVMe; 2 ranks): the trace-event JSON read by Python against tasks.rec and
#                     paje.trace (events, durations, steps, transfers, track names), bad output paths
add_executable(test_trace_report test_trace_report.cpp)
target_link_libraries(test_trace_report PRIVATE starzero_catch_main starzero_profile starzero_runtime)
catch_discover_tests(test_trace_report TEST_PREFIX "trace_report/" PROPERTIES LABELS unit TIMEOUT 120)
starzero_script_test(trace_report_cli trace_report_test.sh ARGS single TIMEOUT 300)
starzero_script_test(trace_report_ranks trace_report_test.sh ARGS ranks TIMEOUT 300 LABELS mpi)
starzero_script_test(trace_perfetto_cli trace_perfetto_test.sh ARGS single TIMEOUT 300)
starzero_script_test(trace_perfetto_ranks trace_perfetto_test.sh ARGS ranks TIMEOUT 300 LABELS mpi)
