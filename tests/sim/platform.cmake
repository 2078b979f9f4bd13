# `starzero platform`: every named machine's platform files (the SimGrid XML parsed by Python, the
# bandwidth and latency matrices against figures computed in the test), user numbers and one-line
# usage errors (a second or two).
starzero_script_test(platform platform_test.sh TIMEOUT 120 LABELS unit)
# `starzero calibrate`: the recorded models and this machine's platform (a few seconds).
starzero_script_test(calibrate calibrate_test.sh TIMEOUT 300 LABELS unit)
