#include "profile/metrics_chart.hpp"

#include <fstream>
#include <limits>
#include <stdexcept>
#include <string>

#include <nlohmann/json.hpp>

#include "profile/gnuplot.hpp"
#include "runtime/files.hpp"

namespace starzero::profile {

namespace {

using json = nlohmann::json;

// A number field of a line; null (how JSON writes a non-finite loss) reads as NaN.
double number_field(const json& line, const char* key, const std::filesystem::path& file, std::size_t line_number) {
  const auto it = line.find(key);
  if (it != line.end() && it->is_number()) return it->get<double>();
  if (it != line.end() && it->is_null()) return std::numeric_limits<double>::quiet_NaN();
  throw_format_error(file, "line " + std::to_string(line_number) + ": no number '" + key + "'");
}

std::uint64_t step_field(const json& line, const std::filesystem::path& file, std::size_t line_number) {
  const auto it = line.find("step");
  if (it == line.end() || !it->is_number_unsigned())
    throw_format_error(file, "line " + std::to_string(line_number) + ": no step number");
  return it->get<std::uint64_t>();
}

}  // namespace

MetricsCurves read_metrics(const std::filesystem::path& file) {
  std::ifstream in(file);
  if (!in) throw_format_error(file, "cannot open");
  MetricsCurves curves;
  std::string text;
  std::size_t line_number = 0;
  while (std::getline(in, text)) {
    ++line_number;
    if (text.find_first_not_of(" \t\r") == std::string::npos) continue;
    const json line = json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (!line.is_object()) throw_format_error(file, "line " + std::to_string(line_number) + " is not a JSON object");
    const std::string event = line.value("event", "");
    if (event == "start") {
      ++curves.runs;
    } else if (event == "step") {
      curves.steps[step_field(line, file, line_number)] = {number_field(line, "loss", file, line_number),
                                                           number_field(line, "tokens_per_second", file, line_number)};
    } else if (event == "validation") {
      curves.validation[step_field(line, file, line_number)] = number_field(line, "loss", file, line_number);
    }
  }
  if (in.bad()) throw_format_error(file, "read error");
  if (curves.steps.empty()) throw_format_error(file, "no step lines (is it a `starzero train --metrics` file?)");
  return curves;
}

void write_metrics_chart(const MetricsCurves& curves, const std::string& title, const std::filesystem::path& svg) {
  const GnuplotScratch scratch;
  {
    std::ofstream steps(scratch.path() / "steps.dat");
    // gnuplot reads NaN as a missing point.
    for (const auto& [step, s] : curves.steps) steps << step << ' ' << s.loss << ' ' << s.tokens_per_second << '\n';
    std::ofstream validation(scratch.path() / "validation.dat");
    for (const auto& [step, loss] : curves.validation) validation << step << ' ' << loss << '\n';
    if (!steps.flush() || !validation.flush())
      throw std::runtime_error("cannot write gnuplot's data in " + scratch.path().string());
  }
  const auto chart = scratch.path() / "chart.svg";
  std::ofstream script(scratch.path() / "chart.gp");
  script << "set terminal svg size 900,640 noenhanced font 'Sans,10' background '#ffffff'\n"
         << "set output " << gnuplot_quoted(chart.string()) << "\n"
         << "cd " << gnuplot_quoted(scratch.path().string()) << "\n"
         << "set multiplot layout 2,1 title " << gnuplot_quoted(title) << "\n"
         << "set grid\nset key top right\nset ylabel 'loss'\n"
         << "plot 'steps.dat' using 1:2 with lines lw 1.5 lc rgb '#4c72b0' title 'training loss'"
         << (curves.validation.empty() ? "" : ", 'validation.dat' using 1:2 with linespoints pt 7 ps 0.6 lw 1.5 "
                                              "lc rgb '#dd8452' title 'validation loss'")
         << "\n"
         << "set xlabel 'step'\nset ylabel 'tokens/s'\nset yrange [0:*]\nunset key\n"
         << "plot 'steps.dat' using 1:3 with lines lw 1.2 lc rgb '#55a868'\n"
         << "unset multiplot\nunset output\n";
  script.close();
  if (!script) throw std::runtime_error("cannot write gnuplot's script in " + scratch.path().string());
  run_gnuplot(scratch.path() / "chart.gp", scratch.path() / "gnuplot.log");
  install_svg(chart, svg);
}

}  // namespace starzero::profile
