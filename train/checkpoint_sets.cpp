#include "train/checkpoint_sets.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <fstream>
#include <system_error>

#include "runtime/files.hpp"

namespace starzero {

namespace fs = std::filesystem;

namespace {

constexpr std::string_view kStepPrefix = "step_";
constexpr std::string_view kPartialPrefix = ".partial-step_";

std::string step_name(std::uint64_t step) { return std::string(kStepPrefix) + std::to_string(step); }

// The number after `prefix` in `name` up to `end` (the end of the name or a '.'), or nullopt.
std::optional<std::uint64_t> number_after(std::string_view name, std::string_view prefix, char stop = '\0') {
  if (!name.starts_with(prefix)) return std::nullopt;
  name.remove_prefix(prefix.size());
  const std::size_t end = stop ? name.find(stop) : std::string_view::npos;
  const std::string_view digits = name.substr(0, end);
  std::uint64_t value = 0;
  const auto [ptr, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), value);
  if (digits.empty() || ec != std::errc() || ptr != digits.data() + digits.size()) return std::nullopt;
  return value;
}

// Makes renames and removals in `dir` durable.
void sync_directory(const fs::path& dir) {
  FileDescriptor fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!fd.valid() || ::fsync(fd.get()) != 0)
    throw std::system_error(errno, std::generic_category(), dir.string() + ": directory fsync failed");
}

}  // namespace

CheckpointSets::CheckpointSets(fs::path dir) : dir_(std::move(dir)) {}

fs::path CheckpointSets::partial(std::uint64_t step, long leader_pid) const {
  return dir_ / (std::string(kPartialPrefix) + std::to_string(step) + "." + std::to_string(leader_pid));
}

fs::path CheckpointSets::partial(std::uint64_t step) const { return partial(step, long(::getpid())); }

fs::path CheckpointSets::partial_model_file(std::uint64_t step, long leader_pid) const {
  return partial(step, leader_pid) / kModelFile;
}

fs::path CheckpointSets::final_folder(std::uint64_t step) const { return dir_ / step_name(step); }

std::optional<fs::path> CheckpointSets::latest() const {
  const fs::path pointer = dir_ / "latest";
  if (!fs::exists(pointer)) return std::nullopt;
  std::ifstream in(pointer);
  std::string name;
  std::getline(in, name);
  if (!number_after(name, kStepPrefix) || in.bad())
    throw_format_error(pointer, "does not name a step folder (expected one line \"step_<N>\")");
  const fs::path model = dir_ / name / kModelFile;
  if (!fs::is_regular_file(model)) throw_format_error(pointer, "names " + name + ", which has no " + kModelFile);
  return model;
}

std::vector<std::uint64_t> CheckpointSets::steps() const {
  std::vector<std::uint64_t> out;
  std::error_code ec;
  for (const fs::directory_entry& entry : fs::directory_iterator(dir_, ec))
    if (const auto step = number_after(entry.path().filename().string(), kStepPrefix); step && entry.is_directory())
      out.push_back(*step);
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<fs::path> CheckpointSets::remove_stale() const {
  std::vector<fs::path> removed;
  std::error_code ec;
  for (const fs::directory_entry& entry : fs::directory_iterator(dir_, ec)) {
    const std::string name = entry.path().filename().string();
    if (!number_after(name, kPartialPrefix, '.')) continue;
    const std::size_t dot = name.rfind('.');
    long pid = 0;
    const auto [ptr, parse_error] = std::from_chars(name.data() + dot + 1, name.data() + name.size(), pid);
    if (parse_error != std::errc() || ptr != name.data() + name.size() || process_may_own(pid, entry.path())) continue;
    std::error_code remove_error;
    fs::remove_all(entry.path(), remove_error);
    if (!remove_error) removed.push_back(entry.path());
  }
  for (fs::path& file : remove_stale_temporaries(dir_ / "latest")) removed.push_back(std::move(file));
  return removed;
}

fs::path CheckpointSets::begin(std::uint64_t step) const {
  fs::create_directories(dir_);
  const fs::path folder = partial(step);
  fs::remove_all(folder);
  fs::create_directory(folder);
  return folder / kModelFile;
}

void CheckpointSets::commit(std::uint64_t step, int keep) const {
  const fs::path folder = final_folder(step);
  // A set of the same step from an earlier timeline (this run resumed from an older set) is
  // replaced. When `latest` names it, `latest` first names the newest other set, so that no
  // moment leaves it naming a folder that is gone.
  if (fs::exists(folder)) {
    const auto current = latest();
    if (current && current->parent_path().filename() == folder.filename()) {
      std::optional<std::uint64_t> other;
      for (const std::uint64_t s : steps())
        if (s != step) other = s;
      if (other)
        write_text_atomically(dir_ / "latest", step_name(*other) + "\n");
      else
        fs::remove(dir_ / "latest");
    }
    fs::remove_all(folder);
  }
  fs::rename(partial(step), folder);
  sync_directory(dir_);
  write_text_atomically(dir_ / "latest", step_name(step) + "\n");
  if (keep <= 0) return;
  // The newest `keep` sets up to this step stay; sets of later steps (an earlier timeline) are
  // left alone.
  std::vector<std::uint64_t> earlier = steps();
  std::erase_if(earlier, [&](std::uint64_t s) { return s >= step; });
  const std::size_t kept = std::size_t(keep - 1);
  if (earlier.size() <= kept) return;
  for (std::size_t i = 0; i + kept < earlier.size(); ++i) fs::remove_all(final_folder(earlier[i]));
  sync_directory(dir_);
}

void CheckpointSets::abandon(std::uint64_t step) const {
  std::error_code ignored;
  fs::remove_all(partial(step), ignored);
}

fs::path resolve_checkpoint_in(const fs::path& path) {
  if (!fs::is_directory(path) || fs::exists(path / "config.json")) return path;  // a file or a Hugging Face folder
  const auto latest = CheckpointSets(path).latest();
  if (!latest) throw_format_error(path, "a folder without a `latest` file: no complete checkpoint set to start from");
  return *latest;
}

}  // namespace starzero
