#include "profile/gnuplot.hpp"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <system_error>

#include "runtime/files.hpp"

extern char** environ;

namespace starzero::profile {

GnuplotScratch::GnuplotScratch() {
  std::string pattern = (std::filesystem::temp_directory_path() / "starzero-chart-XXXXXX").string();
  if (!::mkdtemp(pattern.data()))
    throw std::system_error(errno, std::generic_category(), "cannot create a temporary directory");
  path_ = pattern;
}

GnuplotScratch::~GnuplotScratch() {
  std::error_code ignored;
  std::filesystem::remove_all(path_, ignored);
}

std::string gnuplot_quoted(const std::string& text) {
  std::string out = "'";
  for (char c : text) out += c == '\'' ? std::string("''") : std::string(1, c);
  return out + "'";
}

int run_logged(const std::vector<std::string>& argv, const std::filesystem::path& log) {
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&actions, STDOUT_FILENO, STDERR_FILENO);
  std::vector<std::string> owned(argv);
  std::vector<char*> args;
  for (std::string& a : owned) args.push_back(a.data());
  args.push_back(nullptr);
  pid_t pid = -1;
  const int spawned = posix_spawnp(&pid, args[0], &actions, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (spawned == ENOENT) throw std::runtime_error(argv[0] + " is not on PATH");
  if (spawned != 0) throw std::system_error(spawned, std::generic_category(), "cannot run " + argv[0]);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0)
    if (errno != EINTR) throw std::system_error(errno, std::generic_category(), "waiting for " + argv[0]);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

void run_gnuplot(const std::filesystem::path& script, const std::filesystem::path& log) {
  int rc = 0;
  try {
    rc = run_logged({"gnuplot", script.string()}, log);
  } catch (const std::runtime_error& e) {
    throw std::runtime_error(std::string("charts need gnuplot (Debian: gnuplot-nox): ") + e.what());
  }
  if (rc == 0) return;
  std::ifstream in(log);
  std::string first_line;
  std::getline(in, first_line);
  while (in && first_line.find_first_not_of(" \t^") == std::string::npos) std::getline(in, first_line);
  throw std::runtime_error("gnuplot failed (exit code " + std::to_string(rc) + "): " + first_line);
}

void install_svg(const std::filesystem::path& produced, const std::filesystem::path& svg_path) {
  std::ifstream in(produced, std::ios::binary);
  std::ostringstream svg;
  svg << in.rdbuf();
  if (!in || svg.str().empty()) throw std::runtime_error("gnuplot wrote no SVG");
  write_text_atomically(svg_path, svg.str());
}

}  // namespace starzero::profile
