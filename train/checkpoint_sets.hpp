#pragma once
// A folder of checkpoint sets (`--checkpoint-dir DIR`), the crash-safe unit of a save:
//   DIR/step_<N>/model.bin              the model's checkpoint after optimizer step N (llm.c's)
//   DIR/step_<N>/model.bin[.rank<r>-of-<R>].state   the optimizer state of every rank
//   DIR/latest                          "step_<N>": the newest complete set, written last
// A save writes every rank's files into DIR/.partial-step_<N>.<pid> (pid: the leader's), and
// only when all of them are written does the leader rename that folder to step_<N> and then
// replace `latest`. A kill or a failure at any moment leaves `latest` naming a complete set: the
// previous one until the rename and the rewrite of `latest` are done. Older sets beyond the
// newest K (`--keep-checkpoints K`) are removed after `latest` moves on. The partial folders of dead processes are
// removed when the next run starts, like the temporary files of runtime/files.hpp.
//
// Like DeepSpeed's global_step<N>/ folders and `latest` file; the model file in each set is a
// plain llm.c checkpoint that llm.c and `starzero eval` read as it is.
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace starzero {

class CheckpointSets {
 public:
  explicit CheckpointSets(std::filesystem::path dir);
  const std::filesystem::path& dir() const { return dir_; }

  // The model file of the set `latest` names; nullopt when there is no `latest` yet.
  // FileFormatError when `latest` is malformed or names a folder without its model file.
  std::optional<std::filesystem::path> latest() const;
  // Steps of the complete sets in the folder, ascending.
  std::vector<std::uint64_t> steps() const;

  // Leader, when a run starts: removes partial folders (and temporary `latest` files) whose
  // process no longer runs. Returns them.
  std::vector<std::filesystem::path> remove_stale() const;

  // Leader: an empty partial folder for the save of `step` by the process `leader_pid`; returns
  // the model file's path in it (every rank writes its files beside that path, which
  // partial_model_file gives the other ranks). Creates DIR when missing.
  std::filesystem::path begin(std::uint64_t step) const;
  std::filesystem::path partial_model_file(std::uint64_t step, long leader_pid) const;
  // Leader, once every rank's files are written: the partial folder becomes step_<step>, then
  // `latest` names it, then of the sets before `step` all but the newest keep-1 go (keep 0:
  // none go; sets after `step`, from an earlier timeline, stay).
  void commit(std::uint64_t step, int keep) const;
  // Leader, after a failed save: removes the partial folder (the previous sets stay as they were).
  void abandon(std::uint64_t step) const;

  static constexpr const char* kModelFile = "model.bin";

 private:
  std::filesystem::path partial(std::uint64_t step, long leader_pid) const;
  std::filesystem::path partial(std::uint64_t step) const;
  std::filesystem::path final_folder(std::uint64_t step) const;

  std::filesystem::path dir_;
};

// `--checkpoint-in PATH`: a checkpoint file as it is, or, for a folder of checkpoint sets, the
// model file of its latest set. FileFormatError for a folder without a complete set.
std::filesystem::path resolve_checkpoint_in(const std::filesystem::path& path);

}  // namespace starzero
