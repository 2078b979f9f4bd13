# `starzero-mlp`: a small non-GPT model (a residual-MLP token classifier, defined in the program
# itself) trained by the ZeRO engine with any stage: the engine knows only offload/model.hpp.
add_executable(starzero-mlp mlp_example.cpp cli.cpp ranks.cpp)
target_link_libraries(starzero-mlp PRIVATE starzero_models starzero_offload starzero_tasks starzero_runtime)
