# ZeRO-Offload: offloaded equals plain training (CPU, NVMe tier), placement report, the pinned
# fallback, the delayed update and impossible configurations.
starzero_script_test(offload offload_test.sh TIMEOUT 900 LABELS mpi)
# --speculative-update: bit-identical to the synchronous update (clipped and unclipped steps, bf16,
# accumulation, 2 ranks at ZeRO-1/3, a NaN step, resume), its graph, counts and bad input.
starzero_script_test(speculative speculative_test.sh TIMEOUT 900 LABELS mpi)
# The optimizer state split between device and host (--offload-optimizer-fraction): bitwise equal
# to all-CPU AdamW, the layers of the rule in the banner and the placement report, bad values.
starzero_script_test(offload_fraction offload_fraction_test.sh TIMEOUT 900 LABELS mpi)
# One rank with the whole model on the host (--offload-params cpu at any stage): identical training,
# the device windows against the planner.
starzero_script_test(one_rank_offload one_rank_offload_test.sh TIMEOUT 600 LABELS mpi)
