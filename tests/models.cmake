# models/: llm.c file formats (checkpoints, token shards) and atomic writes, byte tokenizer and
# batches, the GPT layout. Host-side only: no StarPU session is started.
add_executable(test_models test_gpt_files.cpp test_data.cpp test_gpt_layout.cpp test_tokenizer.cpp)
target_link_libraries(test_models PRIVATE starzero_catch_main starzero_models)
catch_discover_tests(test_models TEST_PREFIX "models/" PROPERTIES LABELS unit)
