// Train a small GPT-2 with the library, piece by piece, the way a user program would: choose
// the model (its data and shape), start StarPU, build the model and the ZeRO engine, run the
// Trainer, write a checkpoint. `starzero train` does the same through train/run.hpp, which adds
// data-parallel ranks, offload, resume and reports.
//
//   train_gpt TEXT_FILE [STEPS]      e.g. train_gpt README.md 40
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>

#include "comm/ranks.hpp"
#include "models/registry.hpp"
#include "offload/engine.hpp"
#include "runtime/session.hpp"
#include "train/checkpoint.hpp"
#include "train/run.hpp"
#include "train/trainer.hpp"

int main(int argc, char** argv) {
  using namespace starzero;
  if (argc < 2 || argc > 3) {
    std::fprintf(stderr, "usage: train_gpt TEXT_FILE [STEPS]\n");
    return 2;
  }
  try {
    // 1. The model: GPT-2 `tiny` (4 blocks, 128 channels) on a text file, 32-token rows.
    ModelRequest request;
    request.family = "gpt";
    request.preset = "tiny";
    request.data = argv[1];
    request.seq = 32;
    const std::unique_ptr<ModelSpec> spec = prepare_model(request);
    std::printf("model: %s\n%s\n", spec->describe().c_str(), spec->data_summary().c_str());

    // 2. StarPU with CPU workers only, and the model's tasks for micro-batches of 4 rows.
    SessionOptions session_options;
    session_options.cuda_workers = 0;
    Session session(session_options);
    const std::unique_ptr<Trainable> model =
        spec->build(DType::f32, /*micro_batch=*/4, resolve_tiling({}, session, 4), ActivationPolicy{});

    // 3. The engine: ZeRO stage 0 on one rank, AdamW with global-norm clipping at 1.
    EngineOptions engine_options;
    engine_options.grad_clip = 1.0f;
    Engine engine(*model, engine_options);

    // 4. The loop: 4 rows per step, warm-up then cosine decay, validation every 10 steps.
    const DataParallelRanks ranks;  // one rank without mpirun
    TrainerOptions trainer_options;
    trainer_options.global_batch = 4;
    trainer_options.steps = argc == 3 ? std::atoi(argv[2]) : 40;
    trainer_options.schedule.lr = 3e-3f;
    trainer_options.schedule.warmup = 5;
    trainer_options.val_every = 10;
    trainer_options.sample_tokens = 48;
    Trainer trainer(*model, engine, ranks, trainer_options);
    const TrainingSummary summary = trainer.run(/*first_step=*/1);
    std::printf("loss %.4f -> %.4f in %d steps\n", summary.first_loss, summary.last_loss, summary.steps);
    if (const auto text = trainer.sample(/*seed=*/1)) std::printf("sample: %s\n", text->c_str());

    // 5. An llm.c checkpoint (and its .state for an exact resume).
    const std::filesystem::path out = std::filesystem::temp_directory_path() / "train_gpt_example.bin";
    save_checkpoint(out, spec->checkpoint_format(), engine, ranks, std::uint64_t(summary.steps), DType::f32);
    std::printf("wrote %s\n", out.c_str());
    return summary.last_loss < summary.first_loss ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "train_gpt: %s\n", e.what());
    return 1;
  }
}
