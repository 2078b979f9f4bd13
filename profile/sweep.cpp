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

std::optional<double> median_of(const std::vector<SweepRun>& runs, std::optional<double> SweepRun::*field) {
  std::vector<double> values;
  for (const SweepRun& r : runs)
    if (r.*field) values.push_back(*(r.*field));
  if (values.empty()) return std::nullopt;
  return median(values);
}

std::optional<double> number_or_null(const nlohmann::json& j) {
  if (j.is_number()) return j.get<double>();
  return std::nullopt;
}

// The figures of one run from its trace report (rank 0's with several ranks).
void read_report(const nlohmann::json& full, SweepRun& run) {
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

}  // namespace

std::vector<SweepRow> run_sweep(const SweepOptions& o, const std::function<void(const std::string&)>& progress) {
  if (o.policies.empty() || o.priorities.empty())
    throw std::invalid_argument("--sched and --priorities need at least one value");
  if (o.repeat < 1) throw std::invalid_argument("--repeat must be at least 1");
  if (o.ranks < 1) throw std::invalid_argument("--ranks must be at least 1");
  for (const std::string& a : o.train_args)
    for (const char* own : {"--sched", "--priorities", "--trace", "--quiet"})
      if (a == own || a.starts_with(std::string(own) + "="))
        throw std::invalid_argument(std::string("the sweep sets ") + own + " itself; remove it from the train flags");

  std::vector<SweepRow> rows;
  for (const std::string& policy : o.policies)
    for (const std::string& prio : o.priorities) {
      SweepRow row;
      row.policy = policy;
      row.priorities = prio;
      rows.push_back(std::move(row));
    }
  std::filesystem::create_directories(o.out_dir / "runs");
  const std::size_t total = rows.size() * std::size_t(o.repeat);
  std::size_t done = 0;
  for (int rep = 0; rep < o.repeat; ++rep) {
    for (std::size_t k = 0; k < rows.size(); ++k) {
      SweepRow& row = rows[rep % 2 == 0 ? k : rows.size() - 1 - k];
      SweepRun run;
      run.policy = row.policy;
      run.priorities = row.priorities;
      run.repeat = rep + 1;
      const std::string id = row.policy + "_" + row.priorities + "_r" + std::to_string(rep + 1);
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
                                   std::string("--trace"), run.trace_dir.string(), std::string("--quiet")})
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
      run.tokens_per_s = std::stod(m[1]);

      const std::filesystem::path report = o.out_dir / "runs" / (id + ".json");
      if (const int rc = run_logged({o.program.string(), "trace", run.trace_dir.string(), "--json"}, report); rc != 0)
        throw std::runtime_error("`starzero trace` of run " + id + " exited " + std::to_string(rc) + ": " +
                                 last_line(read_file(report)));
      read_report(nlohmann::json::parse(read_file(report)), run);
      row.runs.push_back(run);
      char line[256];
      std::snprintf(line, sizeof line, "sweep: [%zu/%zu] %s, priorities %s, run %d: %.1f ms/step, %.0f tok/s", ++done,
                    total, row.policy.c_str(), row.priorities.c_str(), rep + 1, run.step_s * 1e3, run.tokens_per_s);
      progress(line);
    }
  }
  for (SweepRow& row : rows) {
    std::vector<double> steps, tokens, busy, gpu;
    for (const SweepRun& r : row.runs) {
      steps.push_back(r.step_s);
      tokens.push_back(r.tokens_per_s);
      busy.push_back(r.steady_busy);
      gpu.push_back(r.gpu_transfer_bytes);
    }
    row.step_s = median(steps);
    row.step_min_s = *std::min_element(steps.begin(), steps.end());
    row.step_max_s = *std::max_element(steps.begin(), steps.end());
    row.tokens_per_s = median(tokens);
    row.steady_busy = median(busy);
    row.gpu_transfer_bytes = median(gpu);
    row.adam_overlap = median_of(row.runs, &SweepRun::adam_overlap);
    row.collective_overlap = median_of(row.runs, &SweepRun::collective_overlap);
  }
  return rows;
}

std::string sweep_table(const std::vector<SweepRow>& rows) {
  std::string text =
      "| policy | priorities | runs | step ms (median) | min–max | tokens/s | steady busy | AdamW overlap | "
      "collective overlap | GPU transfer MB |\n|---|---|---:|---:|---:|---:|---:|---:|---:|---:|\n";
  for (const SweepRow& r : rows) {
    char line[512];
    std::snprintf(line, sizeof line, "| %s | %s | %zu | %.1f | %.1f–%.1f | %.0f | %s | %s | %s | %.1f |\n",
                  r.policy.c_str(), r.priorities.c_str(), r.runs.size(), r.step_s * 1e3, r.step_min_s * 1e3,
                  r.step_max_s * 1e3, r.tokens_per_s, fraction(r.steady_busy).c_str(), fraction(r.adam_overlap).c_str(),
                  fraction(r.collective_overlap).c_str(), r.gpu_transfer_bytes / 1e6);
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
    nlohmann::json runs = nlohmann::json::array();
    for (const SweepRun& run : r.runs)
      runs.push_back({{"repeat", run.repeat},
                      {"step_s", run.step_s},
                      {"tokens_per_s", run.tokens_per_s},
                      {"steady_busy_fraction", run.steady_busy},
                      {"adam_concurrent_fraction", optional_json(run.adam_overlap)},
                      {"collective_concurrent_fraction", optional_json(run.collective_overlap)},
                      {"gpu_transfer_bytes", run.gpu_transfer_bytes},
                      {"trace_dir", run.trace_dir.string()}});
    out["combinations"].push_back({{"policy", r.policy},
                                   {"priorities", r.priorities},
                                   {"step_s", r.step_s},
                                   {"step_min_s", r.step_min_s},
                                   {"step_max_s", r.step_max_s},
                                   {"tokens_per_s", r.tokens_per_s},
                                   {"steady_busy_fraction", r.steady_busy},
                                   {"adam_concurrent_fraction", optional_json(r.adam_overlap)},
                                   {"collective_concurrent_fraction", optional_json(r.collective_overlap)},
                                   {"gpu_transfer_bytes", r.gpu_transfer_bytes},
                                   {"runs", runs}});
  }
  return out;
}

void write_sweep_chart(const std::vector<SweepRow>& rows, const std::filesystem::path& svg) {
  const GnuplotScratch scratch;
  {
    std::ofstream data(scratch.path() / "steps.dat");
    for (std::size_t i = 0; i < rows.size(); ++i) {
      const SweepRow& r = rows[i];
      data << i << ' ' << r.step_s * 1e3 << ' ' << r.step_min_s * 1e3 << ' ' << r.step_max_s * 1e3 << " \"" << r.policy
           << "\\n"
           << r.priorities << "\"\n";
    }
    if (!data.flush()) throw std::runtime_error("cannot write gnuplot's data in " + scratch.path().string());
  }
  const auto chart = scratch.path() / "chart.svg";
  std::ofstream script(scratch.path() / "chart.gp");
  script
      << "set terminal svg size " << std::max<std::size_t>(640, 110 * rows.size())
      << ",480 noenhanced font 'Sans,10' background '#ffffff'\n"
      << "set output " << gnuplot_quoted(chart.string()) << "\n"
      << "set title 'starzero sweep: steady step time per policy and priority scheme (median, min-max over repeats)'\n"
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
