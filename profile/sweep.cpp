#include "profile/sweep.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <regex>
#include <sstream>
#include <stdexcept>

#include "profile/gnuplot.hpp"

namespace starzero::profile {

namespace {

std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

std::string last_line(const std::string& text) {
  std::string line, last;
  std::istringstream in(text);
  while (std::getline(in, line))
    if (!line.empty()) last = line;
  return last;
}

double median(std::vector<double> values) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const std::size_t n = values.size();
  return n % 2 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
}

// The median of each figure over the runs (an overlap over the runs that have one).
SweepFigures median_figures(const std::vector<SweepRun>& runs) {
  const auto of = [&](double SweepFigures::*field) {
    std::vector<double> values;
    for (const SweepRun& r : runs) values.push_back(r.figures.*field);
    return median(values);
  };
  const auto of_optional = [&](std::optional<double> SweepFigures::*field) -> std::optional<double> {
    std::vector<double> values;
    for (const SweepRun& r : runs)
      if (r.figures.*field) values.push_back(*(r.figures.*field));
    if (values.empty()) return std::nullopt;
    return median(values);
  };
  return {.step_s = of(&SweepFigures::step_s),
          .tokens_per_s = of(&SweepFigures::tokens_per_s),
          .steady_busy = of(&SweepFigures::steady_busy),
          .adam_overlap = of_optional(&SweepFigures::adam_overlap),
          .collective_overlap = of_optional(&SweepFigures::collective_overlap),
          .gpu_transfer_bytes = of(&SweepFigures::gpu_transfer_bytes)};
}

std::optional<double> number_or_null(const nlohmann::json& j) {
  if (j.is_number()) return j.get<double>();
  return std::nullopt;
}

// The figures of one run from its trace report (rank 0's with several ranks).
void read_report(const nlohmann::json& full, SweepFigures& run) {
  const nlohmann::json& report = full.contains("ranks") ? full.at("ranks").at(0) : full;
  std::vector<double> steady;
  const auto& steps = report.at("steps");
  for (std::size_t i = steps.size() > 1 ? 1 : 0; i < steps.size(); ++i)
    steady.push_back(steps[i].at("wall_s").get<double>());
  run.step_s = median(steady);
  double busy = 0;
  for (const auto& w : report.at("workers")) busy += number_or_null(w.at("steady_busy_fraction")).value_or(0.0);
  run.steady_busy = report.at("workers").empty() ? 0 : busy / double(report.at("workers").size());
  run.adam_overlap = number_or_null(report.at("overlap").at("adam_concurrent_fraction"));
  run.collective_overlap = number_or_null(report.at("overlap").at("collective_concurrent_fraction"));
  for (const auto& t : report.at("transfers")) {
    const std::string src = t.at("src"), dst = t.at("dst");
    if (src.starts_with("GPU") || dst.starts_with("GPU")) run.gpu_transfer_bytes += t.at("bytes").get<double>();
  }
}

std::string fraction(std::optional<double> f) {
  if (!f) return "-";
  char text[32];
  std::snprintf(text, sizeof text, "%.1f %%", 100 * *f);
  return text;
}

nlohmann::json optional_json(std::optional<double> v) { return v ? nlohmann::json(*v) : nlohmann::json(nullptr); }

// The keys docs/scheduling.md lists for a combination and for each of its runs.
void add_figures(nlohmann::json& out, const SweepFigures& f) {
  out["step_s"] = f.step_s;
  out["tokens_per_s"] = f.tokens_per_s;
  out["steady_busy_fraction"] = f.steady_busy;
  out["adam_concurrent_fraction"] = optional_json(f.adam_overlap);
  out["collective_concurrent_fraction"] = optional_json(f.collective_overlap);
  out["gpu_transfer_bytes"] = f.gpu_transfer_bytes;
}

}  // namespace

std::vector<SweepRow> run_sweep(const SweepOptions& o, const std::function<void(const std::string&)>& progress) {
  if (o.policies.empty() || o.priorities.empty() || o.cpu_compute.empty())
    throw std::invalid_argument("--sched, --priorities and --cpu-compute need at least one value");
  if (o.repeat < 1) throw std::invalid_argument("--repeat must be at least 1");
  if (o.ranks < 1) throw std::invalid_argument("--ranks must be at least 1");
  for (const std::string& a : o.train_args)
    for (const char* own : {"--sched", "--priorities", "--cpu-compute", "--trace", "--quiet"})
      if (a == own || a.starts_with(std::string(own) + "="))
        throw std::invalid_argument(std::string("the sweep sets ") + own + " itself; remove it from the train flags");

  std::vector<SweepRow> rows;
  for (const std::string& policy : o.policies)
    for (const std::string& prio : o.priorities)
      for (const std::string& cpu_compute : o.cpu_compute) {
        SweepRow row;
        row.policy = policy;
        row.priorities = prio;
        row.cpu_compute = cpu_compute;
        rows.push_back(std::move(row));
      }
  std::filesystem::create_directories(o.out_dir / "runs");
  const std::size_t total = rows.size() * std::size_t(o.repeat);
  std::size_t done = 0;
  for (int rep = 0; rep < o.repeat; ++rep) {
    for (std::size_t k = 0; k < rows.size(); ++k) {
      SweepRow& row = rows[rep % 2 == 0 ? k : rows.size() - 1 - k];
      SweepRun run;
      run.repeat = rep + 1;
      const std::string id =
          row.policy + "_" + row.priorities + "_cpu-" + row.cpu_compute + "_r" + std::to_string(rep + 1);
      run.trace_dir = o.out_dir / "runs" / id;
      std::filesystem::remove_all(run.trace_dir);
      std::vector<std::string> argv;
      if (o.ranks > 1) {
        argv = {"mpirun", "-np", std::to_string(o.ranks), "--oversubscribe", "--bind-to", "none"};
        if (geteuid() == 0) argv.push_back("--allow-run-as-root");
      }
      argv.push_back(o.program.string());
      argv.push_back("train");
      argv.insert(argv.end(), o.train_args.begin(), o.train_args.end());
      for (const std::string& a : {std::string("--sched"), row.policy, std::string("--priorities"), row.priorities,
                                   std::string("--cpu-compute"), row.cpu_compute, std::string("--trace"),
                                   run.trace_dir.string(), std::string("--quiet")})
        argv.push_back(a);
      const std::filesystem::path log = o.out_dir / "runs" / (id + ".log");
      if (const int rc = run_logged(argv, log); rc != 0)
        throw std::runtime_error("run " + id + " exited " + std::to_string(rc) + " (" + log.string() +
                                 "): " + last_line(read_file(log)));
      static const std::regex throughput(R"(\(([0-9.]+) tok/s\))");
      std::smatch m;
      const std::string out = read_file(log);
      if (!std::regex_search(out, m, throughput))
        throw std::runtime_error("run " + id + ": no tokens/s in its summary (" + log.string() + ")");
      run.figures.tokens_per_s = std::stod(m[1]);

      const std::filesystem::path report = o.out_dir / "runs" / (id + ".json");
      if (const int rc = run_logged({o.program.string(), "trace", run.trace_dir.string(), "--json"}, report); rc != 0)
        throw std::runtime_error("`starzero trace` of run " + id + " exited " + std::to_string(rc) + ": " +
                                 last_line(read_file(report)));
      read_report(nlohmann::json::parse(read_file(report)), run.figures);
      row.runs.push_back(run);
      char line[256];
      std::snprintf(line, sizeof line,
                    "sweep: [%zu/%zu] %s, priorities %s, cpu compute %s, run %d: %.1f ms/step, %.0f tok/s", ++done,
                    total, row.policy.c_str(), row.priorities.c_str(), row.cpu_compute.c_str(), rep + 1,
                    run.figures.step_s * 1e3, run.figures.tokens_per_s);
      progress(line);
    }
  }
  for (SweepRow& row : rows) {
    row.median = median_figures(row.runs);
    const auto [fastest, slowest] =
        std::minmax_element(row.runs.begin(), row.runs.end(),
                            [](const auto& a, const auto& b) { return a.figures.step_s < b.figures.step_s; });
    row.step_min_s = fastest->figures.step_s;
    row.step_max_s = slowest->figures.step_s;
  }
  return rows;
}

std::string sweep_table(const std::vector<SweepRow>& rows) {
  std::string text =
      "| policy | priorities | CPU compute | runs | step ms (median) | min–max | tokens/s | steady busy | "
      "AdamW overlap | collective overlap | GPU transfer MB |\n|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|\n";
  for (const SweepRow& r : rows) {
    const SweepFigures& m = r.median;
    char line[512];
    std::snprintf(line, sizeof line, "| %s | %s | %s | %zu | %.1f | %.1f–%.1f | %.0f | %s | %s | %s | %.1f |\n",
                  r.policy.c_str(), r.priorities.c_str(), r.cpu_compute.c_str(), r.runs.size(), m.step_s * 1e3,
                  r.step_min_s * 1e3, r.step_max_s * 1e3, m.tokens_per_s, fraction(m.steady_busy).c_str(),
                  fraction(m.adam_overlap).c_str(), fraction(m.collective_overlap).c_str(), m.gpu_transfer_bytes / 1e6);
    text += line;
  }
  return text;
}

nlohmann::json sweep_json(const SweepOptions& o, const std::vector<SweepRow>& rows) {
  nlohmann::json out;
  out["train_args"] = o.train_args;
  out["repeat"] = o.repeat;
  out["ranks"] = o.ranks;
  out["combinations"] = nlohmann::json::array();
  for (const SweepRow& r : rows) {
    nlohmann::json combination = {{"policy", r.policy}, {"priorities", r.priorities}, {"cpu_compute", r.cpu_compute}};
    add_figures(combination, r.median);
    combination["step_min_s"] = r.step_min_s;
    combination["step_max_s"] = r.step_max_s;
    combination["runs"] = nlohmann::json::array();
    for (const SweepRun& run : r.runs) {
      nlohmann::json one = {{"repeat", run.repeat}};
      add_figures(one, run.figures);
      one["trace_dir"] = run.trace_dir.string();
      combination["runs"].push_back(std::move(one));
    }
    out["combinations"].push_back(std::move(combination));
  }
  return out;
}

void write_sweep_chart(const std::vector<SweepRow>& rows, const std::filesystem::path& svg) {
  const GnuplotScratch scratch;
  {
    std::ofstream data(scratch.path() / "steps.dat");
    for (std::size_t i = 0; i < rows.size(); ++i) {
      const SweepRow& r = rows[i];
      data << i << ' ' << r.median.step_s * 1e3 << ' ' << r.step_min_s * 1e3 << ' ' << r.step_max_s * 1e3 << " \""
           << r.policy << "\\n"
           << r.priorities << "\\ncpu " << r.cpu_compute << "\"\n";
    }
    if (!data.flush()) throw std::runtime_error("cannot write gnuplot's data in " + scratch.path().string());
  }
  const auto chart = scratch.path() / "chart.svg";
  std::ofstream script(scratch.path() / "chart.gp");
  script << "set terminal svg size " << std::max<std::size_t>(640, 110 * rows.size())
         << ",480 noenhanced font 'Sans,10' background '#ffffff'\n"
         << "set output " << gnuplot_quoted(chart.string()) << "\n"
         << "set title 'starzero sweep: steady step time per policy, priority scheme and CPU compute (median, min-max "
            "over repeats)'\n"
         << "set ylabel 'ms per step'\nset yrange [0:*]\nset grid ytics\nunset key\n"
         << "set style fill solid 0.6 border -1\nset boxwidth 0.6\nset xtics rotate by -30\n"
         << "cd " << gnuplot_quoted(scratch.path().string()) << "\n"
         << "plot 'steps.dat' using 1:2:xtic(5) with boxes lc rgb '#4c72b0', \\\n"
         << "     'steps.dat' using 1:2:3:4 with yerrorbars lc rgb '#000000' pt 7 ps 0.4\n"
         << "unset output\n";
  script.close();
  if (!script) throw std::runtime_error("cannot write gnuplot's script in " + scratch.path().string());
  run_gnuplot(scratch.path() / "chart.gp", scratch.path() / "gnuplot.log");
  install_svg(chart, svg);
}

}  // namespace starzero::profile
