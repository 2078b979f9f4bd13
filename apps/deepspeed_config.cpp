#include "apps/deepspeed_config.hpp"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <fstream>
#include <optional>
#include <sstream>

#include <nlohmann/json.hpp>

#include "apps/cli.hpp"

namespace starzero {

namespace {

using json = nlohmann::json;

// Walks one JSON object, remembering which keys were used; the rest are reported as ignored.
class Section {
 public:
  Section(const json& object, std::string path, const std::filesystem::path& file, std::vector<std::string>& ignored)
      : object_(object), path_(std::move(path)), file_(file), ignored_(ignored) {}
  ~Section() {
    for (const auto& [key, value] : object_.items())
      if (std::find(used_.begin(), used_.end(), key) == used_.end()) ignored_.push_back(name(key));
  }
  Section(const Section&) = delete;
  Section& operator=(const Section&) = delete;

  // The dotted path of `key`, printable on one line (an empty key shows as "").
  std::string name(const std::string& key) const {
    const std::string shown = key.empty() ? std::string("\"\"") : cli::printable(key, 60);
    return path_.empty() ? shown : path_ + "." + shown;
  }
  [[noreturn]] void bad(const std::string& key, const std::string& what) const {
    throw UsageError(file_.string() + ": " + name(key) + ": " + what);
  }
  // The value of `key`, or nullptr when absent or "auto".
  const json* find(const std::string& key) {
    used_.push_back(key);
    const auto it = object_.find(key);
    if (it == object_.end() || (it->is_string() && it->get<std::string>() == "auto")) return nullptr;
    return &*it;
  }
  std::optional<double> number(const std::string& key, double min_value, double max_value) {
    const json* v = find(key);
    if (!v) return std::nullopt;
    if (!v->is_number()) bad(key, "expected a number, got " + cli::printable(v->dump()));
    double x = v->get<double>();
    if (x == 0) x = 0;  // -0 would print as "-0", which the flag parser refuses (found by fuzz_deepspeed_config)
    if (!(x >= min_value && x <= max_value))
      bad(key, cli::printable(v->dump()) + " is out of range [" + format(min_value) + ", " + format(max_value) + "]");
    return x;
  }
  std::optional<long long> integer(const std::string& key, long long min_value, long long max_value) {
    const json* v = find(key);
    if (!v) return std::nullopt;
    if (!v->is_number_integer()) bad(key, "expected a whole number, got " + cli::printable(v->dump()));
    const long long x = v->get<long long>();
    if (x < min_value || x > max_value)
      bad(key, std::to_string(x) + " is out of range [" + std::to_string(min_value) + ", " + std::to_string(max_value) + "]");
    return x;
  }
  std::optional<bool> boolean(const std::string& key) {
    const json* v = find(key);
    if (!v) return std::nullopt;
    if (!v->is_boolean()) bad(key, "expected true or false, got " + cli::printable(v->dump()));
    return v->get<bool>();
  }
  std::optional<std::string> text(const std::string& key) {
    const json* v = find(key);
    if (!v) return std::nullopt;
    if (!v->is_string()) bad(key, "expected a string, got " + cli::printable(v->dump()));
    return v->get<std::string>();
  }
  // A nested object (nullptr when absent); `key` counts as used.
  const json* object(const std::string& key) {
    const json* v = find(key);
    if (v && !v->is_object()) bad(key, "expected an object, got " + cli::printable(v->dump()));
    return v;
  }
  static std::string format(double x) {
    char text[32];
    std::snprintf(text, sizeof text, "%.9g", x);
    return text;
  }

 private:
  const json& object_;
  std::string path_;
  const std::filesystem::path& file_;
  std::vector<std::string>& ignored_;
  std::vector<std::string> used_;
};

std::string lower(std::string s) {
  for (char& c : s) c = char(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

struct Builder {
  DeepSpeedFlags out;
  void set(const std::string& flag, const std::string& value, const std::string& key) {
    out.flags.push_back({flag, value, key, false});
  }
  void imply(const std::string& flag, const std::string& value, const std::string& why) {
    out.flags.push_back({flag, value, why, true});
  }
  bool has(const std::string& flag) const {
    return std::any_of(out.flags.begin(), out.flags.end(), [&](const ConfigFlag& f) { return f.flag == flag; });
  }
};

// train_batch_size = micro batch per rank × accumulation steps × ranks: any two give the third.
void batch_sizes(Section& top, Builder& b, int ranks) {
  const auto global = top.integer("train_batch_size", 1, 1 << 30);
  const auto micro = top.integer("train_micro_batch_size_per_gpu", 1, 1 << 30);
  const auto accum = top.integer("gradient_accumulation_steps", 1, 1 << 30);
  long long batch = 0, steps = 0;
  if (global && micro && accum) {
    if (*global != *micro * *accum * ranks)
      top.bad("train_batch_size", std::to_string(*global) + " is not train_micro_batch_size_per_gpu " +
                                      std::to_string(*micro) + " x gradient_accumulation_steps " +
                                      std::to_string(*accum) + " x " + std::to_string(ranks) + " ranks");
    batch = *global, steps = *accum;
  } else if (global && micro) {
    if (*global % (*micro * ranks) != 0)
      top.bad("train_batch_size", std::to_string(*global) + " is not a multiple of train_micro_batch_size_per_gpu " +
                                      std::to_string(*micro) + " x " + std::to_string(ranks) + " ranks");
    batch = *global, steps = *global / (*micro * ranks);
  } else if (global && accum) {
    if (*global % (*accum * ranks) != 0)
      top.bad("train_batch_size", std::to_string(*global) + " is not a multiple of gradient_accumulation_steps " +
                                      std::to_string(*accum) + " x " + std::to_string(ranks) + " ranks");
    batch = *global, steps = *accum;
  } else if (global) {
    batch = *global, steps = 1;
  } else if (micro) {
    steps = accum.value_or(1), batch = *micro * steps * ranks;
  } else if (accum) {
    b.set("grad-accum", std::to_string(*accum), "gradient_accumulation_steps");
    return;
  } else {
    return;
  }
  b.set("batch", std::to_string(batch), global ? "train_batch_size" : "train_micro_batch_size_per_gpu");
  b.set("grad-accum", std::to_string(steps), accum ? "gradient_accumulation_steps" : "train_batch_size");
}

void precision(Section& top, Builder& b, std::vector<std::string>& ignored, const std::filesystem::path& file) {
  for (const char* kind : {"fp16", "bf16"}) {
    const json* section = top.object(kind);
    if (!section) continue;
    Section s(*section, kind, file, ignored);
    const bool enabled = s.boolean("enabled").value_or(false);
    if (enabled && std::string(kind) == "fp16")
      s.bad("enabled", "fp16 with loss scaling is not supported: use \"bf16\": {\"enabled\": true}");
    if (enabled) b.set("precision", "bf16", "bf16.enabled");
    if (std::string(kind) == "fp16")  // its loss-scaling keys mean nothing without fp16
      for (const char* key : {"loss_scale", "loss_scale_window", "initial_scale_power", "hysteresis",
                              "min_loss_scale", "auto_cast", "consecutive_hysteresis"})
        s.find(key);
  }
  if (!b.has("precision")) b.imply("precision", "fp32", "(no bf16.enabled: DeepSpeed trains in fp32)");
}

void zero(Section& top, Builder& b, std::vector<std::string>& ignored, const std::filesystem::path& file) {
  const json* z = top.find("zero_optimization");
  if (!z) return;
  if (z->is_boolean()) {  // the old form: true is stage 1
    b.set("stage", *z ? "1" : "0", "zero_optimization");
    return;
  }
  if (!z->is_object()) top.bad("zero_optimization", "expected an object or true/false");
  Section s(*z, "zero_optimization", file, ignored);
  if (const auto stage = s.integer("stage", 0, 3)) b.set("stage", std::to_string(*stage), "zero_optimization.stage");
  if (const auto overlap = s.boolean("overlap_comm"); overlap && !*overlap)
    ignored.push_back("zero_optimization.overlap_comm=false (collectives are tasks: they always overlap)");
  if (s.boolean("cpu_offload").value_or(false)) b.set("offload-optimizer", "cpu", "zero_optimization.cpu_offload");
  if (const json* o = s.object("offload_optimizer")) {
    Section os(*o, "zero_optimization.offload_optimizer", file, ignored);
    const std::string device = os.text("device").value_or("none");
    if (device != "none" && device != "cpu" && device != "nvme")
      os.bad("device", "'" + cli::printable(device) + "' is not none, cpu or nvme");
    b.set("offload-optimizer", device, "zero_optimization.offload_optimizer.device");
    if (const auto path = os.text("nvme_path"); path && device == "nvme")
      b.set("nvme-path", *path, "zero_optimization.offload_optimizer.nvme_path");
    // DeepSpeed's share of the state updated by the CPU Adam (ZeRO-Offload++).
    if (const auto ratio = os.number("ratio", 0, 1); ratio && device != "none")
      b.set("offload-optimizer-fraction", Section::format(*ratio), "zero_optimization.offload_optimizer.ratio");
    if (const auto pin = os.boolean("pin_memory"); pin && !*pin)
      ignored.push_back("zero_optimization.offload_optimizer.pin_memory=false (host state is always pinned)");
  }
  if (const json* o = s.object("offload_param")) {
    Section ps(*o, "zero_optimization.offload_param", file, ignored);
    const std::string device = ps.text("device").value_or("none");
    if (device == "nvme") ps.bad("device", "parameter offload to NVMe is not supported (cpu or none)");
    if (device != "none" && device != "cpu") ps.bad("device", "'" + cli::printable(device) + "' is not none or cpu");
    b.set("offload-params", device, "zero_optimization.offload_param.device");
    if (const auto pin = ps.boolean("pin_memory"); pin && !*pin)
      ignored.push_back("zero_optimization.offload_param.pin_memory=false (host shards are always pinned)");
  }
}

void optimizer(Section& top, Builder& b, std::vector<std::string>& ignored, const std::filesystem::path& file) {
  const json* o = top.object("optimizer");
  if (!o) return;
  Section s(*o, "optimizer", file, ignored);
  const std::string type = s.text("type").value_or("AdamW");
  if (lower(type) != "adamw" && lower(type) != "adam")
    s.bad("type", "'" + cli::printable(type) + "' is not supported (Adam or AdamW)");
  const json* params = s.object("params");
  if (!params) return;
  Section p(*params, "optimizer.params", file, ignored);
  if (lower(type) == "adam" && !p.boolean("adam_w_mode").value_or(true))
    p.bad("adam_w_mode", "Adam with L2 regularisation is not supported (AdamW: decoupled weight decay)");
  if (const auto lr = p.number("lr", 0, 10)) b.set("lr", Section::format(*lr), "optimizer.params.lr");
  if (const auto wd = p.number("weight_decay", 0, 10))
    b.set("weight-decay", Section::format(*wd), "optimizer.params.weight_decay");
  if (const auto eps = p.number("eps", 0, 1)) b.set("adam-eps", Section::format(*eps), "optimizer.params.eps");
  if (const json* betas = p.find("betas")) {
    if (!betas->is_array() || betas->size() != 2 || !(*betas)[0].is_number() || !(*betas)[1].is_number())
      p.bad("betas", "expected [beta1, beta2], got " + cli::printable(betas->dump()));
    for (int i = 0; i < 2; ++i) {
      const double beta = (*betas)[std::size_t(i)].get<double>() + 0.0;  // + 0.0: -0 becomes 0
      if (!(beta >= 0 && beta < 1)) p.bad("betas", cli::printable(betas->dump()) + ": each must be in [0, 1)");
      b.set(i == 0 ? "adam-beta1" : "adam-beta2", Section::format(beta), "optimizer.params.betas");
    }
  }
  p.find("torch_adam");  // which implementation: the math is the same
  if (p.boolean("amsgrad").value_or(false)) p.bad("amsgrad", "AMSGrad is not supported");
  if (!p.boolean("bias_correction").value_or(true)) p.bad("bias_correction", "AdamW without bias correction is not supported");
}

void scheduler(Section& top, Builder& b, std::vector<std::string>& ignored, const std::filesystem::path& file) {
  const json* o = top.object("scheduler");
  if (!o) {  // DeepSpeed without a scheduler keeps the optimizer's learning rate
    b.imply("lr-schedule", "cosine", "(no scheduler: a constant learning rate)");
    b.imply("warmup", "0", "(no scheduler: a constant learning rate)");
    b.imply("lr-final", "1", "(no scheduler: a constant learning rate)");
    return;
  }
  Section s(*o, "scheduler", file, ignored);
  const std::string type = s.text("type").value_or("");
  const std::string kind = type == "WarmupLR"         ? "ds-warmup"
                           : type == "WarmupDecayLR"  ? "ds-warmup-decay"
                           : type == "WarmupCosineLR" ? "ds-warmup-cosine"
                                                      : "";
  if (kind.empty())
    s.bad("type", "'" + cli::printable(type) + "' is not supported (WarmupLR, WarmupDecayLR or WarmupCosineLR)");
  b.set("lr-schedule", kind, "scheduler.type");
  static const json empty = json::object();
  const json* params = s.object("params");
  Section p(params ? *params : empty, "scheduler.params", file, ignored);
  // DeepSpeed's defaults where a key is left out: 1000 warm-up steps, "log" warm-up.
  const auto steps = p.integer("warmup_num_steps", 0, 1 << 30);
  b.set("warmup", std::to_string(steps.value_or(1000)), "scheduler.params.warmup_num_steps");
  const std::string shape = p.text("warmup_type").value_or("log");
  if (shape != "log" && shape != "linear") p.bad("warmup_type", "'" + cli::printable(shape) + "' is not log or linear");
  b.set("warmup-type", shape, "scheduler.params.warmup_type");
  if (const auto total = p.integer("total_num_steps", 1, 1 << 30); total && kind != "ds-warmup")
    b.set("lr-total", std::to_string(*total), "scheduler.params.total_num_steps");
  if (kind == "ds-warmup-cosine") {
    if (const auto r0 = p.number("warmup_min_ratio", 0, 1))
      b.set("warmup-min", Section::format(*r0), "scheduler.params.warmup_min_ratio");
    b.set("lr-final", Section::format(p.number("cos_min_ratio", 0, 1).value_or(0.0001)),
          "scheduler.params.cos_min_ratio");
  } else {
    if (const auto low = p.number("warmup_min_lr", 0, 10))
      b.set("warmup-min", Section::format(*low), "scheduler.params.warmup_min_lr");
    // The peak is warmup_max_lr when given (it wins over optimizer.params.lr, as in DeepSpeed).
    if (const auto high = p.number("warmup_max_lr", 0, 10)) {
      std::erase_if(b.out.flags, [](const ConfigFlag& f) { return f.flag == "lr"; });
      b.set("lr", Section::format(*high), "scheduler.params.warmup_max_lr");
    } else if (kind == "ds-warmup-decay" && !b.has("lr")) {
      b.set("lr", "0.001", "scheduler.params.warmup_max_lr (DeepSpeed's default)");
    }
  }
  p.find("last_batch_iteration");  // -1: from the start, which is what a run without resume does
}

}  // namespace

DeepSpeedFlags deepspeed_flags(std::string_view text, const std::filesystem::path& file, int ranks) {
  const json config = json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (config.is_discarded()) throw UsageError(file.string() + ": not valid JSON");
  if (!config.is_object()) throw UsageError(file.string() + ": a DeepSpeed config is a JSON object");
  Builder b;
  {
    Section top(config, "", file, b.out.ignored);
    batch_sizes(top, b, ranks);
    if (const auto clip = top.number("gradient_clipping", 0, 1e9))
      b.set("grad-clip", Section::format(*clip), "gradient_clipping");
    else
      b.imply("grad-clip", "0", "(no gradient_clipping: DeepSpeed does not clip)");
    precision(top, b, b.out.ignored, file);
    zero(top, b, b.out.ignored, file);
    optimizer(top, b, b.out.ignored, file);
    scheduler(top, b, b.out.ignored, file);
    // DeepSpeed's activation checkpointing recomputes whole blocks: --recompute full.
    if (const json* a = top.object("activation_checkpointing")) {
      Section ac(*a, "activation_checkpointing", file, b.out.ignored);
      b.set("recompute", "full", "activation_checkpointing");
      if (ac.boolean("cpu_checkpointing").value_or(false))
        b.set("offload-activations", "cpu", "activation_checkpointing.cpu_checkpointing");
      for (const char* key : {"partition_activations", "contiguous_memory_optimization", "number_checkpoints",
                              "synchronize_checkpoint_boundary", "profile"})
        if (ac.find(key)) b.out.ignored.push_back("activation_checkpointing." + std::string(key) +
                                                  " (model parallelism and memory layout: nothing to do here)");
    }
  }  // the top section lists its unused keys here
  std::sort(b.out.ignored.begin(), b.out.ignored.end());
  return b.out;
}

DeepSpeedFlags read_deepspeed_config(const std::filesystem::path& file, int ranks) {
  std::ifstream in(file, std::ios::binary);
  if (!in) throw UsageError("--deepspeed-config: cannot read '" + cli::printable(file.string()) + "'");
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) throw UsageError("--deepspeed-config: cannot read '" + cli::printable(file.string()) + "'");
  return deepspeed_flags(text.str(), file, ranks);
}

}  // namespace starzero
