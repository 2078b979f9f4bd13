#pragma once
// Which attention kernel the CUDA workers run (--attention auto|cudnn|own; docs/manual.md,
// "Attention on the GPU"): cuDNN's fused flash attention (tasks/attention_cudnn.hpp) or our own
// kernels (tasks/nn_kernels.cu), which stay the reference and the fallback. A run turns the
// request into one kernel once, before its first task (resolve_attention), and sets it for the
// session; the attention codelets' CUDA functions run it and their GPU cost class charges it
// (runtime/gpu_cost.hpp). CPU workers always run the CPU kernels.
#include <optional>
#include <string>
#include <string_view>

namespace starzero::tasks {

enum class AttentionRequest { automatic, cudnn, own };
enum class AttentionKernel { cudnn, own };

// "auto", "cudnn", "own"; nullopt for anything else.
std::optional<AttentionRequest> parse_attention_request(std::string_view text);
// "cudnn" or "own".
const char* attention_kernel_name(AttentionKernel kernel);

// Whether this build calls cuDNN (CMake found it; STARZERO_WITH_CUDNN).
bool cudnn_linked();

struct ResolvedAttention {
  AttentionKernel kernel = AttentionKernel::own;
  std::string why;  // for the banner: why this kernel ("cuDNN flash attention", "fp32: ...")
};

// The kernel a run uses. `gpu`: the run has CUDA workers (in a simulation, the platform has
// GPUs); `two_byte`: the storage type is bf16 (fp32 runs use the own kernel); `in_sim`: the
// run only charges the kernel's cost (starzero-sim), so cuDNN need not be linked. auto: cuDNN
// where it can run, else the own kernel with the reason. Throws std::invalid_argument (one line)
// for an explicit `cudnn` that cannot run here.
ResolvedAttention resolve_attention(AttentionRequest request, bool gpu, bool two_byte, bool in_sim);

// The session's kernel: set once before the first task, read by the attention codelets.
// Default: own.
void set_session_attention(AttentionKernel kernel);
AttentionKernel session_attention();

}  // namespace starzero::tasks
