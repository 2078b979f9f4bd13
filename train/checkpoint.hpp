#pragma once
// Checkpoints of a training run, for any model (its CheckpointFormat, train/trainable.hpp):
//   FILE                       the model's own checkpoint (GPT: llm.c's), written by the leader
//                              from the master weights gathered from every rank's shard
//   FILE.state                 one rank: step, data position, fp32 master/m/v of every layer
//   FILE.rank<r>-of-<N>.state  N ranks: each its own shard (train/state_files.hpp)
// A resume reads whichever state files exist and re-shards them for this run's ranks; files of
// another rank count beside FILE are removed once a save has written all of its own. Every file
// is written atomically.
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "comm/ranks.hpp"
#include "offload/engine.hpp"
#include "runtime/dtype.hpp"
#include "train/checkpoint_sets.hpp"
#include "train/sharded_state.hpp"
#include "train/state_files.hpp"
#include "train/trainable.hpp"

namespace starzero {

// What a run starts from, checked before StarPU starts (the checkpoint's header and size, the
// state files): the parameters themselves are read once the engine exists, straight into its
// buffers.
struct ResumeFiles {
  std::filesystem::path checkpoint;
  const CheckpointFormat* format = nullptr;   // checkpoint's format; outlives the run
  std::optional<ShardedTrainingState> state;  // optimizer state and step, when saved
};
// The model's checkpoint as a Hugging Face folder: native.hugging_face(), kept in `held`;
// std::invalid_argument when the model has none.
const CheckpointFormat& hugging_face_format(const CheckpointFormat& native, std::unique_ptr<CheckpointFormat>& held);
// The format of the checkpoint at `path`: a folder is a Hugging Face one, a file native's.
const CheckpointFormat& checkpoint_format_at(const std::filesystem::path& path, const CheckpointFormat& native,
                                             std::unique_ptr<CheckpointFormat>& held);

// FileFormatError for a checkpoint or state file that does not fit `format`.
ResumeFiles read_resume_files(const std::filesystem::path& checkpoint, const CheckpointFormat& format);

// Sets the engine's parameters (and, with state files, its optimizer state: this rank's part,
// whatever rank count wrote them). Returns the optimizer steps already done (0: fresh state).
std::uint64_t apply_resume_files(const ResumeFiles& files, Engine& engine);

// Writes FILE (leader) and every rank's state file after optimizer step `step`; collective.
// Applies a pending delayed update first, so the files hold the updated state. Never writes
// non-finite parameters: std::runtime_error naming the first layer that has one. The state files
// record `data_position` (Trainable::data_position_after; default: the step).
void save_checkpoint(const std::filesystem::path& checkpoint, const CheckpointFormat& format, Engine& engine,
                     const DataParallelRanks& ranks, std::uint64_t step, DType precision,
                     std::optional<std::uint64_t> data_position = std::nullopt);

// The same files as a set in `sets` (train/checkpoint_sets.hpp): written into a partial folder,
// which becomes step_<step> and `latest` once every rank is done; then all but the newest `keep`
// sets go. After a failure the partial folder is removed and the error propagates. Collective.
void save_checkpoint_set(const CheckpointSets& sets, int keep, const CheckpointFormat& format, Engine& engine,
                         const DataParallelRanks& ranks, std::uint64_t step, DType precision,
                         std::optional<std::uint64_t> data_position = std::nullopt);

struct ConsolidateResult {
  int ranks = 0;                  // state files merged
  std::uint64_t step = 0;         // the step they were saved at
  std::size_t largest_slice = 0;  // the most values held in memory at once
  std::string format;             // what was written ("llm.c version 3")
};
// The checkpoint format of the model whose state files record these shape fields.
using FormatOfState = std::function<std::unique_ptr<CheckpointFormat>(const StateShapeFields&)>;
// The model checkpoint rebuilt from the state files beside `checkpoint` alone, one layer slice
// at a time. std::invalid_argument when there are no state files.
ConsolidateResult consolidate_checkpoint(const std::filesystem::path& checkpoint, const std::filesystem::path& out,
                                         const FormatOfState& format_of_state, DType precision);

}  // namespace starzero
