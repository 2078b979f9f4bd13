# models/gpt + offload/engine end to end on CPU workers: the GPT-2 model's loss against an
# independent double-precision reference (reference_gpt2.hpp), whole-model gradients against
# finite differences, bf16 against fp32, initial loss, overfitting one batch, determinism,
# AdamW-only parameter updates, the llm.c parameter layout and masked targets. Each case starts
# its own Session.
add_executable(test_gpt_model test_gpt_model.cpp)
target_link_libraries(test_gpt_model PRIVATE starzero_catch_main starzero_models)
# The prefix keeps every test case selectable with `ctest -R gpt/`.
catch_discover_tests(test_gpt_model TEST_PREFIX "gpt/" PROPERTIES LABELS unit TIMEOUT 300)
