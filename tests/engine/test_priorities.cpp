// Task priorities (runtime/priorities.hpp): the step graph built from data accesses, its upward
// ranks on hand-made graphs with known answers, and the critical-path ranks of a real GPT step.
#include <catch2/catch.hpp>
#include <vector>

#include "comm/ranks.hpp"
#include "models/registry.hpp"
#include "offload/engine.hpp"
#include "runtime/priorities.hpp"
#include "runtime/session.hpp"
#include "runtime/tensor.hpp"
#include "train/run.hpp"
#include "train/trainer.hpp"

using namespace starzero;

namespace {

// Distinct fake handles: StepGraph only compares them, it never dereferences them.
std::vector<starpu_data_handle_t> fake_handles(std::size_t n) {
  std::vector<starpu_data_handle_t> handles;
  for (std::size_t i = 0; i < n; ++i) handles.push_back(reinterpret_cast<starpu_data_handle_t>(0x1000 + 16 * i));
  return handles;
}

std::size_t add(StepGraph& g, double us, std::vector<starpu_data_handle_t> handles,
                std::vector<starpu_data_access_mode> modes) {
  return g.add({"t", us, handles, modes});
}

}  // namespace

TEST_CASE("priorities/scheme names parse and print", "[priorities]") {
  CHECK(parse_priority_scheme("none") == PriorityScheme::none);
  CHECK(parse_priority_scheme("critical-path") == PriorityScheme::critical_path);
  CHECK_FALSE(parse_priority_scheme("critical_path"));
  CHECK_FALSE(parse_priority_scheme(""));
  CHECK(std::string(priority_scheme_name(PriorityScheme::critical_path)) == "critical-path");
}

TEST_CASE("priorities/dependencies follow sequential consistency", "[priorities]") {
  const auto h = fake_handles(3);
  StepGraph g;
  const auto w0 = add(g, 1, {h[0]}, {STARPU_W});                        // writes a
  const auto r1 = add(g, 1, {h[0], h[1]}, {STARPU_R, STARPU_W});        // reads a, writes b
  const auto r2 = add(g, 1, {h[0], h[2]}, {STARPU_R, STARPU_W});        // reads a, writes c
  const auto w3 = add(g, 1, {h[0]}, {STARPU_RW});                       // after the writer and both readers
  const auto s4 = add(g, 1, {h[1], h[2]}, {STARPU_SCRATCH, STARPU_R});  // scratch carries nothing
  CHECK(g.predecessors(w0).empty());
  CHECK(g.predecessors(r1) == std::vector<std::size_t>{w0});
  CHECK(g.predecessors(r2) == std::vector<std::size_t>{w0});
  CHECK(g.predecessors(w3) == std::vector<std::size_t>{w0, r1, r2});
  CHECK(g.predecessors(s4) == std::vector<std::size_t>{r2});
}

TEST_CASE("priorities/upward ranks are the longest path to the end of the step", "[priorities]") {
  // a(10) -> b(20) -> d(5); a -> c(40) -> d; e(7) alone. Ranks: d 5, b 25, c 45, a 55, e 7.
  const auto h = fake_handles(4);
  StepGraph g;
  const auto a = add(g, 10, {h[0]}, {STARPU_W});
  const auto b = add(g, 20, {h[0], h[1]}, {STARPU_R, STARPU_W});
  const auto c = add(g, 40, {h[0], h[2]}, {STARPU_R, STARPU_W});
  const auto d = add(g, 5, {h[1], h[2]}, {STARPU_R, STARPU_R});
  const auto e = add(g, 7, {h[3]}, {STARPU_RW});
  const auto rank = g.upward_ranks();
  CHECK(rank[d] == 5);
  CHECK(rank[b] == 25);
  CHECK(rank[c] == 45);
  CHECK(rank[a] == 55);
  CHECK(rank[e] == 7);
}

TEST_CASE("priorities/pieces of a split tensor are independent of each other, not of the whole", "[priorities]") {
  const auto h = fake_handles(3);  // whole, piece 0, piece 1
  StepGraph g;
  g.add_piece(h[1], h[0]);
  g.add_piece(h[2], h[0]);
  const auto whole_write = add(g, 1, {h[0]}, {STARPU_W});
  const auto tile0 = add(g, 1, {h[1]}, {STARPU_RW});
  const auto tile1 = add(g, 1, {h[2]}, {STARPU_RW});
  const auto whole_read = add(g, 1, {h[0]}, {STARPU_R});
  const auto tile0_again = add(g, 1, {h[1]}, {STARPU_W});
  CHECK(g.predecessors(tile0) == std::vector<std::size_t>{whole_write});
  CHECK(g.predecessors(tile1) == std::vector<std::size_t>{whole_write});  // not after tile 0
  CHECK(g.predecessors(whole_read) == std::vector<std::size_t>{whole_write, tile0, tile1});
  // After the tile's own last access and the whole's reader (the edge from the whole's writer
  // is implied by them, and harmless).
  CHECK(g.predecessors(tile0_again) == std::vector<std::size_t>{whole_write, tile0, whole_read});
  g.forget_pieces(h[0]);
  g.clear();
  const auto after = add(g, 1, {h[1]}, {STARPU_W});
  const auto whole = add(g, 1, {h[0]}, {STARPU_W});
  CHECK(g.predecessors(after).empty());
  CHECK(g.predecessors(whole).empty());  // h[1] is no longer a piece of h[0]
}

TEST_CASE("priorities/ranks map onto the scheduler's priority range", "[priorities]") {
  SessionOptions wide;
  wide.cpu_workers = 1;
  wide.cuda_workers = 0;
  wide.policy = "dmdas";
  {
    Session session(wide);  // dmdas: INT_MIN..INT_MAX, ranks in whole µs
    CHECK(TaskPriorities::to_priority(1234.4, 5000) == 1234);
    CHECK(TaskPriorities::to_priority(0, 5000) == 0);
  }
  SessionOptions buckets = wide;
  buckets.policy = "heteroprio";
  Session session(buckets);  // our heteroprio set-up: 8 buckets, 0..7
  CHECK(starpu_sched_get_min_priority() == 0);
  CHECK(starpu_sched_get_max_priority() == 7);
  CHECK(TaskPriorities::to_priority(5000, 5000) == 7);
  CHECK(TaskPriorities::to_priority(2600, 5000) == 4);
  CHECK(TaskPriorities::to_priority(0, 5000) == 0);
}

TEST_CASE("priorities/critical path of a GPT step: the backward outranks the next layer's AdamW", "[priorities]") {
  ModelRequest request;
  request.family = "gpt";
  request.preset = "tiny";
  request.data = std::string(STARZERO_SOURCE_DIR) + "/README.md";
  request.seq = 32;
  const auto spec = prepare_model(request);
  SessionOptions options;
  options.cpu_workers = 2;
  options.cuda_workers = 0;
  options.policy = "dmdas";
  options.priorities = PriorityScheme::critical_path;
  Session session(options);
  const int tiles = GENERATE(1, 2);
  const auto model = spec->build(DType::f32, 4, Tiling{tiles, std::nullopt}, ActivationPolicy{});
  EngineOptions engine_options;
  engine_options.grad_clip = 0;  // AdamW of layer l may start as soon as its gradient is done
  Engine engine(*model, engine_options);
  const DataParallelRanks ranks;
  TrainerOptions trainer_options;
  trainer_options.global_batch = 4;
  trainer_options.steps = 2;
  trainer_options.val_every = 0;
  trainer_options.quiet = true;
  Trainer trainer(*model, engine, ranks, trainer_options);
  trainer.run(1);

  const TaskPriorities& p = TaskPriorities::instance();
  const std::string tile = tiles > 1 ? ".t0" : "";
  const int blocks = 4;  // tiny
  for (int b = 0; b + 1 < blocks; ++b) {
    // Block b is layer b+1; the AdamW of layer b+2 runs once block b+1's backward is done.
    const auto backward = p.rank_us("ln1_bwd_input[" + std::to_string(b) + "]" + tile);
    const auto next_adam = p.rank_us("adamw[" + std::to_string(b + 2) + "]");
    REQUIRE(backward);
    REQUIRE(next_adam);
    CHECK(*backward > *next_adam);
  }
  // The forward starts the longest chain: the first load outranks everything after it.
  const auto first = p.rank_us("load_inputs");
  const auto last_adam = p.rank_us("adamw[0]");
  REQUIRE(first);
  REQUIRE(last_adam);
  CHECK(*first > *p.rank_us("qkv_fwd[0]" + tile));
  CHECK(*p.rank_us("qkv_fwd[0]" + tile) > *p.rank_us("qkv_fwd[3]" + tile));
  CHECK(*first > *last_adam);
  // Tasks of the step have ranks at least their own duration; none is unknown or negative.
  CHECK(*last_adam > 0);
}
