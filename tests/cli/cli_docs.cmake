# docs/cli.md against the built program's --help (scripts/gen-cli-docs.sh): fails with the
# command to regenerate it when a help text changed without the reference (under a second).
add_test(NAME cli_docs
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/cli_docs_test.sh $<TARGET_FILE:starzero>
                 ${PROJECT_SOURCE_DIR}/docs/cli.md)
set_tests_properties(cli_docs PROPERTIES TIMEOUT 60)
