# models/: llm.c file formats (checkpoints, token shards) and atomic writes, byte tokenizer and
# batches, the GPT layout, JSONL fine-tuning data and mask shards. Host-side only: no StarPU session is started.
add_executable(test_models test_gpt_files.cpp test_data.cpp test_gpt_layout.cpp test_tokenizer.cpp test_jsonl.cpp)
find_package(nlohmann_json 3 REQUIRED)
target_link_libraries(test_models PRIVATE starzero_catch_main starzero_models nlohmann_json::nlohmann_json)
catch_discover_tests(test_models TEST_PREFIX "models/" PROPERTIES LABELS unit)

# Tokenizer::encode against an independent byte-level BPE in Python (tests/models/bpe_reference.py, the
# `regex` module for \p{L} and \p{N}): GPT-2-style and Llama-3-style tokenizer.json fixtures.
add_executable(tokenizer_encode_check tokenizer_encode_check.cpp)
target_link_libraries(tokenizer_encode_check PRIVATE starzero_models nlohmann_json::nlohmann_json)
add_test(NAME models/tokenizer_encode
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/tokenizer_encode_test.sh $<TARGET_FILE:tokenizer_encode_check>)
set_tests_properties(models/tokenizer_encode PROPERTIES LABELS unit TIMEOUT 300)

# Streamed token shards end to end: resident memory against the data's size, a folder, a glob,
# --val-data, 1 and 2 ranks, resume mid-epoch (also from 2 ranks to 1), bad shards and flags.
starzero_script_test(data_stream data_stream_test.sh TIMEOUT 600 LABELS mpi)

# Fine-tuning on JSONL (issue 39): with the prompts masked, a tiny GPT learns fixed completions after
# random prompts (loss on completions below 0.05) but not the prompts (the loss on all tokens stays
# far above a run trained on all of them); `eval --loss-on completion|all` against a pure-Python GPT-2
# (tests/models/gpt2_reference_loss.py) over the shard `starzero tokenize` writes (about 20 s).
starzero_script_test(finetune_mask finetune_mask_test.sh TIMEOUT 300)
