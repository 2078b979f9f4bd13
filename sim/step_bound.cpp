#include "sim/step_bound.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <stdexcept>

namespace starzero::sim {
namespace {

std::string printed(const char* format, double value) {
  char text[64];
  std::snprintf(text, sizeof text, format, value);
  return text;
}

// "742 T", "25.7 G", "0 ": three significant digits and a decimal prefix.
std::string with_prefix(double x, const char* unit) {
  static constexpr std::pair<double, const char*> kPrefixes[] = {{1e18, "E"}, {1e15, "P"}, {1e12, "T"},
                                                                 {1e9, "G"},  {1e6, "M"},  {1e3, "k"}};
  for (const auto& [scale, prefix] : kPrefixes)
    if (std::fabs(x) >= scale) return printed("%.3g", x / scale) + " " + prefix + unit;
  return printed("%.3g", x) + " " + unit;
}

std::string json_number(double x) { return std::isfinite(x) ? printed("%.17g", x) : "null"; }
std::string json_number(const std::optional<double>& x) { return x ? json_number(*x) : "null"; }
std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    if (static_cast<unsigned char>(c) < 0x20) {
      char escaped[8];
      std::snprintf(escaped, sizeof escaped, "\\u%04x", unsigned(c));
      out += escaped;
      continue;
    }
    out += c;
  }
  return out + "\"";
}

void require_amount(const char* what, double value) {
  if (!(value >= 0) || !std::isfinite(value))
    throw std::invalid_argument(std::string("step bound: ") + what + " must be a finite number >= 0, got " +
                                printed("%g", value));
}

// `work` at `rate`: its seconds (0 for no work; unset at no known rate) and the words for it.
ResourceTime timed(Resource resource, double work, double rate, const char* unit, const char* rate_unit) {
  ResourceTime t;
  t.resource = resource;
  if (work == 0) {
    t.seconds = 0.0;
    t.what = "none";
  } else if (rate > 0) {
    t.seconds = work / rate;
    t.what = with_prefix(work, unit) + " at " + with_prefix(rate, rate_unit);
  } else {
    t.what = with_prefix(work, unit) + " at no known rate";
  }
  return t;
}

}  // namespace

ResourceRates rates_of_machine(const MachineSpec& m, bool two_byte, int compute_cores, int adam_threads) {
  if (compute_cores < 0 || compute_cores > m.cpus || adam_threads < 0 || adam_threads > m.cpus)
    throw std::invalid_argument("step bound: compute cores and AdamW threads must be 0.." + std::to_string(m.cpus) +
                                " (the machine's cores), got " + std::to_string(compute_cores) + " and " +
                                std::to_string(adam_threads));
  ResourceRates r;
  const double core_memory_Bps = m.host_memory_Bps / double(m.cpus);  // the cores share the memory
  if (m.gpus > 0) {
    r.compute_device = "GPU";
    r.compute_flops_per_s = (two_byte ? m.gpu_bf16_flops : m.gpu_fp32_flops) * m.gemm_efficiency;
    r.gpu = {.bf16_tensor_flops = m.gpu_bf16_flops,
             .fp32_flops = m.gpu_fp32_flops,
             .memory_Bps = m.gpu_memory_Bps,
             .sm_count = m.gpu_sm_count,
             .clock_hz = m.gpu_clock_hz,
             .launch_s = m.kernel_launch_s,
             .measured_attention = m.attention_rates.empty()
                                       ? nullptr
                                       : std::make_shared<const std::vector<MeasuredAttentionRate>>(m.attention_rates)};
    r.host_to_gpu_Bps = std::min(m.host_to_gpu_Bps, m.host_memory_Bps);
    r.gpu_to_host_Bps = std::min(m.gpu_to_host_Bps, m.host_memory_Bps);
  } else {
    r.compute_device = "CPU";
    r.compute_flops_per_s = double(compute_cores) * m.cpu_core_flops * m.gemm_efficiency;
  }
  r.adam_threads = adam_threads;
  r.adam_bytes_per_s = double(adam_threads) * core_memory_Bps * m.elementwise_efficiency;
  r.adam_flops_per_s = double(adam_threads) * m.cpu_core_flops * m.gemm_efficiency;
  r.disk_read_Bps = m.disk_read_Bps;
  r.disk_write_Bps = m.disk_write_Bps;
  r.source = m.name + "'s figures (" + std::string(m.gpus > 0 ? "GPU kernels by cost class; CPU: " : "") + "peaks x GEMM " +
             printed("%.2g", m.gemm_efficiency) + ", element-wise " + printed("%.2g", m.elementwise_efficiency) + ")";
  return r;
}

std::string gpu_class_text(const GpuSecondsByClass& seconds) {
  std::string text;
  for (const GpuCostClass kind : kGpuCostClasses) {
    const double s = seconds[std::size_t(kind)];
    if (s <= 0) continue;
    text += (text.empty() ? "" : ", ") + std::string(gpu_cost_class_name(kind)) + " " + seconds_text(s);
  }
  return text.empty() ? "none" : text;
}

std::string seconds_text(std::optional<double> seconds) {
  if (!seconds) return "unknown";
  const double s = *seconds;
  return printed(s >= 100 ? "%.1f s" : s >= 0.001 || s == 0 ? "%.4f s" : "%.3g s", s);
}

std::string resource_label(Resource resource, const std::string& compute_device) {
  switch (resource) {
    case Resource::compute: return compute_device + " compute";
    case Resource::cpu_adam: return "CPU AdamW";
    case Resource::pcie_to_gpu: return "PCIe host->GPU";
    case Resource::pcie_to_host: return "PCIe GPU->host";
    case Resource::disk: return "disk";
  }
  return "?";
}

const char* resource_key(Resource resource) {
  switch (resource) {
    case Resource::compute: return "compute";
    case Resource::cpu_adam: return "cpu_adam";
    case Resource::pcie_to_gpu: return "pcie_to_gpu";
    case Resource::pcie_to_host: return "pcie_to_host";
    case Resource::disk: return "disk";
  }
  return "?";
}

std::optional<double> StepBound::bound_s() const {
  if (!binding) return std::nullopt;
  return time_of(*binding).seconds;
}

const ResourceTime& StepBound::time_of(Resource resource) const {
  for (const ResourceTime& t : resources)
    if (t.resource == resource) return t;
  throw std::logic_error("step bound without the resource " + std::string(resource_key(resource)));
}

StepBound step_bound(const StepWork& work, const ResourceRates& rates) {
  if (work.compute_flops) require_amount("compute FLOPs", *work.compute_flops);
  for (const auto& [what, value] : {std::pair{"AdamW bytes", work.adam_bytes},
                                    {"AdamW FLOPs", work.adam_flops},
                                    {"host-to-GPU bytes", work.host_to_gpu_bytes},
                                    {"GPU-to-host bytes", work.gpu_to_host_bytes},
                                    {"disk read bytes", work.disk_read_bytes},
                                    {"disk write bytes", work.disk_write_bytes},
                                    {"compute rate", rates.compute_flops_per_s},
                                    {"AdamW byte rate", rates.adam_bytes_per_s},
                                    {"AdamW FLOP rate", rates.adam_flops_per_s},
                                    {"host-to-GPU rate", rates.host_to_gpu_Bps},
                                    {"GPU-to-host rate", rates.gpu_to_host_Bps},
                                    {"disk read rate", rates.disk_read_Bps},
                                    {"disk write rate", rates.disk_write_Bps}})
    require_amount(what, value);
  StepBound b;
  b.compute_device = rates.compute_device;

  ResourceTime compute;
  std::optional<GpuSecondsByClass> by_class = work.gpu_kernel_seconds;
  if (!by_class && !work.gpu_kernels.empty() && rates.gpu.bf16_tensor_flops > 0)
    by_class = gpu_seconds_by_class(work.gpu_kernels, rates.gpu);
  if (rates.compute_device == "GPU" && by_class) {
    compute.resource = Resource::compute;
    double total = 0;
    for (const double seconds : *by_class) total += seconds;
    compute.seconds = total;
    compute.what = "GPU kernels by cost class: " + gpu_class_text(*by_class);
    b.compute_by_class = by_class;
  } else if (work.compute_flops) {
    compute = timed(Resource::compute, *work.compute_flops, rates.compute_flops_per_s, "FLOP", "FLOP/s");
  } else {
    compute.resource = Resource::compute;
    compute.what = "unknown FLOPs (the model declares none)";
  }
  b.resources.push_back(compute);

  // The CPU AdamW: its bytes or its FLOPs, whichever takes longer (the simulator's roofline).
  ResourceTime adam = timed(Resource::cpu_adam, work.adam_bytes, rates.adam_bytes_per_s, "B", "B/s");
  const ResourceTime adam_flops = timed(Resource::cpu_adam, work.adam_flops, rates.adam_flops_per_s, "FLOP", "FLOP/s");
  if (adam.seconds && adam_flops.seconds && *adam_flops.seconds > *adam.seconds) adam = adam_flops;
  if (adam.seconds && work.adam_bytes > 0)
    adam.what += " (" + std::to_string(rates.adam_threads) + (rates.adam_threads == 1 ? " thread)" : " threads)");
  b.resources.push_back(adam);

  b.resources.push_back(timed(Resource::pcie_to_gpu, work.host_to_gpu_bytes, rates.host_to_gpu_Bps, "B", "B/s"));
  b.resources.push_back(timed(Resource::pcie_to_host, work.gpu_to_host_bytes, rates.gpu_to_host_Bps, "B", "B/s"));

  const ResourceTime reads = timed(Resource::disk, work.disk_read_bytes, rates.disk_read_Bps, "B", "B/s");
  const ResourceTime writes = timed(Resource::disk, work.disk_write_bytes, rates.disk_write_Bps, "B", "B/s");
  ResourceTime disk;
  disk.resource = Resource::disk;
  if (reads.seconds && writes.seconds) disk.seconds = *reads.seconds + *writes.seconds;
  disk.what = work.disk_read_bytes == 0 && work.disk_write_bytes == 0 ? "none"
                                                                      : "read " + reads.what + ", write " + writes.what;
  b.resources.push_back(disk);

  for (const ResourceTime& t : b.resources)
    if (t.seconds && (!b.binding || *t.seconds > *b.time_of(*b.binding).seconds)) b.binding = t.resource;
  return b;
}

double efficiency(double bound_s, double steady_step_s) {
  if (!(steady_step_s > 0) || !std::isfinite(steady_step_s))
    throw std::invalid_argument("step bound: the steady step must last > 0 s, got " + printed("%g", steady_step_s));
  return bound_s / steady_step_s;
}

std::vector<std::string> bound_lines(const StepBound& bound, const ResourceRates& rates,
                                     std::optional<double> steady_step_s, const std::string& indent) {
  std::vector<std::string> lines;
  lines.push_back(indent + "step bound per rank, from " + rates.source + ":");
  for (const ResourceTime& t : bound.resources) {
    std::string label = resource_label(t.resource, bound.compute_device);
    label.resize(std::max<std::size_t>(label.size(), 16), ' ');
    std::string time = seconds_text(t.seconds);
    time.resize(std::max<std::size_t>(time.size(), 10), ' ');
    lines.push_back(indent + "  " + label + time + "  " + t.what + (bound.binding == t.resource ? "  <- bound" : ""));
  }
  const std::optional<double> bound_s = bound.bound_s();
  if (!bound_s) {
    lines.push_back(indent + "bound unknown: no resource's time is known");
    return lines;
  }
  const std::string bound_text =
      "bound " + seconds_text(*bound_s) + " (" + resource_label(*bound.binding, bound.compute_device) + ")";
  if (steady_step_s && *steady_step_s > 0)
    lines.push_back(indent + "steady step " + seconds_text(*steady_step_s) + ", " + bound_text + ", efficiency " +
                    printed("%.1f %%", 100.0 * efficiency(*bound_s, *steady_step_s)));
  else
    lines.push_back(indent + bound_text);
  return lines;
}

std::vector<std::pair<std::string, std::string>> bound_json_fields(const StepBound& bound, const StepWork& work,
                                                                   const ResourceRates& rates,
                                                                   std::optional<double> steady_step_s) {
  std::vector<std::pair<std::string, std::string>> fields;
  for (const ResourceTime& t : bound.resources)
    fields.emplace_back(std::string(resource_key(t.resource)) + "_s", json_number(t.seconds));
  const std::optional<double> bound_s = bound.bound_s();
  fields.emplace_back("bound_s", json_number(bound_s));
  fields.emplace_back("binding", bound.binding ? json_string(resource_key(*bound.binding)) : "null");
  const bool steady = steady_step_s && *steady_step_s > 0;
  fields.emplace_back("steady_step_s", steady ? json_number(*steady_step_s) : "null");
  fields.emplace_back("efficiency",
                      steady && bound_s ? json_number(efficiency(*bound_s, *steady_step_s)) : std::string("null"));
  fields.emplace_back("compute_device", json_string(rates.compute_device));
  fields.emplace_back("compute_flops", json_number(work.compute_flops));
  for (const auto& [key, value] : {std::pair{"compute_flops_per_s", rates.compute_flops_per_s},
                                   {"adam_threads", double(rates.adam_threads)},
                                   {"adam_bytes", work.adam_bytes},
                                   {"adam_bytes_per_s", rates.adam_bytes_per_s},
                                   {"host_to_gpu_bytes", work.host_to_gpu_bytes},
                                   {"host_to_gpu_Bps", rates.host_to_gpu_Bps},
                                   {"gpu_to_host_bytes", work.gpu_to_host_bytes},
                                   {"gpu_to_host_Bps", rates.gpu_to_host_Bps},
                                   {"disk_read_bytes", work.disk_read_bytes},
                                   {"disk_read_Bps", rates.disk_read_Bps},
                                   {"disk_write_bytes", work.disk_write_bytes},
                                   {"disk_write_Bps", rates.disk_write_Bps}})
    fields.emplace_back(key, json_number(value));
  fields.emplace_back("rates_source", json_string(rates.source));
  // The compute time by GPU cost class (null: the work came as FLOPs).
  std::string by_class = "null";
  if (bound.compute_by_class) {
    nlohmann::ordered_json j;
    for (const GpuCostClass kind : kGpuCostClasses) j[gpu_cost_class_name(kind)] = (*bound.compute_by_class)[std::size_t(kind)];
    by_class = j.dump();
  }
  fields.emplace_back("compute_s_by_gpu_class", by_class);
  return fields;
}

namespace {

// Every number of the file, by its name in it.
template <class Figures, class Visit>
void for_each_number(Figures& f, Visit&& visit) {
  visit("compute_flops_per_s", f.rates.compute_flops_per_s);
  visit("adam_bytes_per_s", f.rates.adam_bytes_per_s);
  visit("adam_flops_per_s", f.rates.adam_flops_per_s);
  visit("host_to_gpu_Bps", f.rates.host_to_gpu_Bps);
  visit("gpu_to_host_Bps", f.rates.gpu_to_host_Bps);
  visit("disk_read_Bps", f.rates.disk_read_Bps);
  visit("disk_write_Bps", f.rates.disk_write_Bps);
  visit("planned_adam_bytes", f.planned.adam_bytes);
  visit("planned_adam_flops", f.planned.adam_flops);
  visit("planned_host_to_gpu_bytes", f.planned.host_to_gpu_bytes);
  visit("planned_gpu_to_host_bytes", f.planned.gpu_to_host_bytes);
  visit("planned_disk_read_bytes", f.planned.disk_read_bytes);
  visit("planned_disk_write_bytes", f.planned.disk_write_bytes);
}

std::optional<double> optional_number(const nlohmann::json& j, const char* key) {
  if (!j.contains(key)) throw std::invalid_argument(std::string("step bound file: no \"") + key + "\"");
  if (j[key].is_null()) return std::nullopt;
  if (!j[key].is_number()) throw std::invalid_argument(std::string("step bound file: \"") + key + "\" is not a number");
  return j[key].get<double>();
}

}  // namespace

std::string run_bound_json(const RunBoundFigures& figures) {
  nlohmann::ordered_json j;
  j["compute_device"] = figures.rates.compute_device;
  j["adam_threads"] = figures.rates.adam_threads;
  j["rates_source"] = figures.rates.source;
  j["planned_compute_flops"] =
      figures.planned.compute_flops ? nlohmann::ordered_json(*figures.planned.compute_flops) : nullptr;
  for_each_number(figures, [&](const char* key, const double& value) { j[key] = value; });
  // The planned kernels' charge by GPU cost class (what `starzero trace` bounds compute with).
  std::optional<GpuSecondsByClass> by_class = figures.planned.gpu_kernel_seconds;
  if (!by_class && !figures.planned.gpu_kernels.empty() && figures.rates.gpu.bf16_tensor_flops > 0)
    by_class = gpu_seconds_by_class(figures.planned.gpu_kernels, figures.rates.gpu);
  if (by_class) {
    nlohmann::ordered_json classes;
    for (const GpuCostClass kind : kGpuCostClasses) classes[gpu_cost_class_name(kind)] = (*by_class)[std::size_t(kind)];
    j["planned_gpu_kernel_s"] = classes;
  } else {
    j["planned_gpu_kernel_s"] = nullptr;
  }
  j["steady_step_s"] = figures.steady_step_s ? nlohmann::ordered_json(*figures.steady_step_s) : nullptr;
  return j.dump(2) + "\n";
}

RunBoundFigures run_bound_from_json(std::string_view text) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw std::invalid_argument(std::string("step bound file is not JSON: ") + e.what());
  }
  if (!j.is_object()) throw std::invalid_argument("step bound file: not a JSON object");
  RunBoundFigures f;
  if (!j.contains("compute_device") || !j["compute_device"].is_string() || !j.contains("rates_source") ||
      !j["rates_source"].is_string())
    throw std::invalid_argument("step bound file: no \"compute_device\" or \"rates_source\" string");
  f.rates.compute_device = j["compute_device"].get<std::string>();
  if (f.rates.compute_device != "GPU" && f.rates.compute_device != "CPU")
    throw std::invalid_argument("step bound file: \"compute_device\" must be \"GPU\" or \"CPU\"");
  f.rates.source = j["rates_source"].get<std::string>();
  if (!j.contains("adam_threads") || !j["adam_threads"].is_number_integer() || j["adam_threads"].get<double>() < 0 ||
      j["adam_threads"].get<double>() > 1e6)
    throw std::invalid_argument("step bound file: \"adam_threads\" is not a count");
  f.rates.adam_threads = j["adam_threads"].get<int>();
  f.planned.compute_flops = optional_number(j, "planned_compute_flops");
  if (f.planned.compute_flops) require_amount("planned_compute_flops", *f.planned.compute_flops);
  for_each_number(f, [&](const char* key, double& value) {
    const std::optional<double> number = optional_number(j, key);
    if (!number) throw std::invalid_argument(std::string("step bound file: \"") + key + "\" is null");
    require_amount(key, *number);
    value = *number;
  });
  // Optional: a file written before the GPU cost classes has none.
  if (j.contains("planned_gpu_kernel_s") && !j["planned_gpu_kernel_s"].is_null()) {
    const nlohmann::json& classes = j["planned_gpu_kernel_s"];
    if (!classes.is_object()) throw std::invalid_argument("step bound file: \"planned_gpu_kernel_s\" is not an object");
    GpuSecondsByClass seconds{};
    for (const GpuCostClass kind : kGpuCostClasses) {
      const char* key = gpu_cost_class_name(kind);
      if (!classes.contains(key) || !classes[key].is_number())
        throw std::invalid_argument(std::string("step bound file: planned_gpu_kernel_s has no number \"") + key + "\"");
      seconds[std::size_t(kind)] = classes[key].get<double>();
      require_amount(key, seconds[std::size_t(kind)]);
    }
    f.planned.gpu_kernel_seconds = seconds;
  }
  f.steady_step_s = optional_number(j, "steady_step_s");
  if (f.steady_step_s && !(*f.steady_step_s > 0 && std::isfinite(*f.steady_step_s)))
    throw std::invalid_argument("step bound file: \"steady_step_s\" must be > 0");
  return f;
}

}  // namespace starzero::sim
