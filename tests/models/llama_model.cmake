# models/llama* (Llama 3, docs/llama.md): the model end to end on CPU workers against an
# independent double-precision reference (reference_llama3.hpp) for the loss and, by finite
# differences, every parameter's gradient, with 1 and 2 tiles; tiles against one tile; every
# recompute and offload mode bit for bit against none, and their activation bytes; bf16 against fp32; initialisation; the presets against
# Meta's sizes; llm.c Llama 3 checkpoints and token shards, malformed files included.
add_executable(test_llama_model test_llama_model.cpp)
target_link_libraries(test_llama_model PRIVATE starzero_catch_main starzero_models)
# The prefix keeps every test case selectable with `ctest -R llama/`.
catch_discover_tests(test_llama_model TEST_PREFIX "llama/" PROPERTIES LABELS unit TIMEOUT 300)
# `starzero train --model llama3` (tests/models/llama_train_test.sh):
#   llama_train     - one rank: llama3-tiny learns bytes (falling loss), the checkpoint reads back,
#                     resume continues exactly, bad input exits 2
#   llama_zero_np2  - 2 MPI ranks, ZeRO-3: the losses and the final checkpoint of one rank
#   llama_tiles     - --tiles 1, 2, 4 and auto: bitwise identical across scheduling policies,
#                     losses agreeing across tile counts, the per-tile tasks in a trace
#   llama_recompute - --recompute selective|full and --offload-activations cpu: checkpoints
#                     bitwise identical to none's, activation bytes as the formula says
starzero_script_test(llama_train llama_train_test.sh ARGS single TIMEOUT 300)
starzero_script_test(llama_zero_np2 llama_train_test.sh ARGS zero_np2 TIMEOUT 600 LABELS mpi)
starzero_script_test(llama_tiles llama_train_test.sh ARGS tiles TIMEOUT 600)
starzero_script_test(llama_recompute llama_train_test.sh ARGS recompute TIMEOUT 600)
