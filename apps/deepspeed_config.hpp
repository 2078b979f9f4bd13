#pragma once
// `starzero train --deepspeed-config FILE`: a DeepSpeed config (ds_config.json) turned into the
// `starzero train` flags that run the same training, key by key (the table: docs/deepspeed-config.md).
// Each flag carries the key it came from; a flag the file implies by leaving a key out (DeepSpeed's
// own default: fp32, no clipping, a constant learning rate) applies only when the command line
// does not set that flag. Keys without an equivalent are listed for one warning; keys that ask
// for something starzero does not do (fp16, other optimizers or schedulers, parameter offload to
// NVMe) are errors. "auto" (the value Hugging Face's Trainer fills in) counts as absent.
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

namespace starzero {

struct ConfigFlag {
  std::string flag;   // without "--": "batch"
  std::string value;  // as it would be typed
  std::string key;    // where it came from: "train_batch_size", or "(default)" for an implied one
  bool implied = false;
};

struct DeepSpeedFlags {
  std::vector<ConfigFlag> flags;
  std::vector<std::string> ignored;  // keys with no effect here, with why when it is not obvious
};

// Parses `text` (the file's contents) for `ranks` data-parallel ranks. UsageError naming
// `file` and the key for malformed JSON, wrong types, impossible values or unsupported features.
DeepSpeedFlags deepspeed_flags(std::string_view text, const std::filesystem::path& file, int ranks);
// The same, reading the file (UsageError when it cannot be read).
DeepSpeedFlags read_deepspeed_config(const std::filesystem::path& file, int ranks);

}  // namespace starzero
