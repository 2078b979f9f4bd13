# Hugging Face folders (safetensors, config.json) in and out: tests/models/hf_test.sh's four parts against
# folders a Python script writes (tests/models/hf_fixture.py), round trips of llm.c checkpoints, a 2-rank
# ZeRO-3 run's --checkpoint-format hf, and malformed files; and the reader's unit tests.
foreach(part foreign roundtrip errors)
  starzero_script_test(hf/${part} hf_test.sh ARGS ${part} TIMEOUT 300)
endforeach()
starzero_script_test(hf/zero hf_test.sh ARGS zero TIMEOUT 300 LABELS mpi)
add_executable(test_safetensors test_safetensors.cpp)
target_link_libraries(test_safetensors PRIVATE starzero_catch_main starzero_models)
catch_discover_tests(test_safetensors TEST_PREFIX "models/" PROPERTIES LABELS unit)
# docs/manual.md's recipe "Fine-tuning a Hugging Face Llama 3 on JSONL", run as written on the fixture folder.
starzero_script_test(hf/finetune_recipe finetune_recipe_test.sh TIMEOUT 300)
