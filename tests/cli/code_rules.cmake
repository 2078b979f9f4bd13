# The code rules of CONTRIBUTING.md on the checkout: function lengths (universal-ctags, which
# scripts/bootstrap.sh installs) and the simulation seam.
add_test(NAME code_rules COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/code_rules_test.sh ${PROJECT_SOURCE_DIR})
set_tests_properties(code_rules PROPERTIES TIMEOUT 120)
