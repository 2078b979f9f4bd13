#pragma once
// Evaluation of a model from its checkpoint: the mean loss over the first K batches of its
// evaluation data, read sequentially from the start (as llm.c's validation loader reads a shard).
// One rank, forward passes only.
#include <cstddef>
#include <filesystem>

#include "runtime/precision.hpp"
#include "runtime/session.hpp"
#include "train/trainable.hpp"

namespace starzero {

struct EvaluationOptions {
  std::filesystem::path checkpoint;
  int batch = 1;    // rows per batch
  int batches = 1;  // K
  Precision precision = Precision::fp32;
  SessionOptions session;
};

// std::invalid_argument when the data holds fewer than K whole batches.
double evaluate_checkpoint(const ModelSpec& spec, const EvaluationOptions& options);

}  // namespace starzero
