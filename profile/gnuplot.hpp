#pragma once
// Charts are drawn by gnuplot (Debian's gnuplot-nox), never by an SVG writer of our own: the
// chart's data and script go to a scratch folder, `gnuplot` runs there, and the SVG it wrote is
// moved into place. Also the one way profile/ runs another program (run_logged).
#include <filesystem>
#include <string>
#include <vector>

namespace starzero::profile {

// A folder under $TMPDIR (or /tmp) for a chart's input, removed with its files.
class GnuplotScratch {
 public:
  GnuplotScratch();
  ~GnuplotScratch();
  GnuplotScratch(const GnuplotScratch&) = delete;
  GnuplotScratch& operator=(const GnuplotScratch&) = delete;
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

// A string in gnuplot's single quotes (no escapes inside; a quote is doubled).
std::string gnuplot_quoted(const std::string& text);

// Runs argv (argv[0] looked up on PATH) with stdout and stderr into `log`; returns its exit
// status (128 + the signal when killed). Throws std::runtime_error when it cannot start.
int run_logged(const std::vector<std::string>& argv, const std::filesystem::path& log);

// Runs `gnuplot script` with its output in log; throws when gnuplot is missing or fails (with
// its first error line).
void run_gnuplot(const std::filesystem::path& script, const std::filesystem::path& log);

// Moves the SVG gnuplot wrote (`produced`) to svg_path atomically; throws if it is empty.
void install_svg(const std::filesystem::path& produced, const std::filesystem::path& svg_path);

}  // namespace starzero::profile
