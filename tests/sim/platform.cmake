# `starzero platform`: every named machine's platform files (the SimGrid XML parsed by Python, the
# bandwidth and latency matrices against figures computed in the test), user numbers and one-line
# usage errors (a second or two).
add_test(NAME platform COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/platform_test.sh $<TARGET_FILE:starzero>)
set_tests_properties(platform PROPERTIES LABELS unit TIMEOUT 120)
# `starzero calibrate`: the recorded models and this machine's platform (a few seconds).
add_test(NAME calibrate COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/calibrate_test.sh $<TARGET_FILE:starzero>)
set_tests_properties(calibrate PROPERTIES LABELS unit TIMEOUT 300)
