#include "train/evaluate.hpp"

#include <stdexcept>
#include <string>

#include "offload/engine.hpp"
#include "train/checkpoint.hpp"
#include "train/run.hpp"

namespace starzero {

double evaluate_checkpoint(const ModelSpec& spec, const EvaluationOptions& options) {
  // Check the file before StarPU starts (its values are read into the engine).
  std::unique_ptr<CheckpointFormat> folder_format;  // a Hugging Face folder's
  const CheckpointFormat& format = checkpoint_format_at(options.checkpoint, spec.checkpoint_format(), folder_format);
  format.check(options.checkpoint);
  const ResumeFiles files{options.checkpoint, &format, std::nullopt};
  Session session(options.session);
  const std::unique_ptr<Trainable> model = spec.build(storage_dtype(options.precision), options.batch,
                                                      resolve_tiling({}, session, options.batch), ActivationPolicy{});
  const std::size_t available = model->validation_batches(options.batch);
  if (available < std::size_t(options.batches))
    throw std::invalid_argument("--batches " + std::to_string(options.batches) + ": the data holds only " +
                                std::to_string(available) + " whole batches");
  EngineOptions engine_options;
  engine_options.initialise_params = false;  // the checkpoint's values replace them
  Engine engine(*model, engine_options);
  apply_resume_files(files, engine);
  BatchLossMean loss;
  for (int b = 0; b < options.batches; ++b) {
    model->load_validation_rows(std::size_t(b), BatchRows{0, options.batch, options.batch});
    engine.submit_forward();
    loss.add(model->mean_loss(), model->batch_targets());
  }
  return loss.mean();
}

}  // namespace starzero
