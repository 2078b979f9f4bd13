// The step's walks and their transitions (offload/step_walk.hpp) on a model whose layers submit
// nothing: unshard and reshard are idempotent, and a walk visits the layers in order with each
// layer's parameters unsharded around its tasks and resharded after.
#include <catch2/catch.hpp>

#include <algorithm>
#include <string>
#include <vector>

#include "offload/layer_buffers.hpp"
#include "offload/step_walk.hpp"
#include "runtime/ledger.hpp"
#include "runtime/session.hpp"

namespace {

using namespace starzero;

// Layers of `sizes` parameters; forward and backward only record which layer they were asked for.
class RecordingModel final : public Model {
 public:
  explicit RecordingModel(std::vector<std::size_t> sizes) : sizes_(std::move(sizes)) {}
  int layers() const override { return int(sizes_.size()); }
  std::size_t layer_params(int layer) const override { return sizes_.at(std::size_t(layer)); }
  std::string layer_name(int layer) const override { return "layer" + std::to_string(layer); }
  DType dtype() const override { return DType::f32; }
  void init_layer(int, std::span<float> params, std::uint64_t) const override {
    std::fill(params.begin(), params.end(), 0.0f);
  }
  void submit_forward(int layer, const GroupHandles& groups) override { record("fwd", layer, groups); }
  void submit_backward(int layer, const GroupHandles& groups) override { record("bwd", layer, groups); }
  std::vector<std::string> calls;

 private:
  void record(const char* pass, int layer, const GroupHandles& groups) {
    REQUIRE(groups.param(layer) != nullptr);
    calls.push_back(std::string(pass) + std::to_string(layer));
  }
  std::vector<std::size_t> sizes_;
};

// One rank's layers, with the parameters on the host (fetched to the device per use, inside the
// prefetch window) or resident.
std::vector<LayerBuffers> one_rank_layers(const Model& model, ParamOffload params) {
  std::vector<LayerBuffers> layers;
  layers.reserve(std::size_t(model.layers()));
  for (int l = 0; l < model.layers(); ++l) {
    LayerPlanInput input;
    input.offload_params = params;
    input.params = model.layer_params(l);
    layers.emplace_back(input, l, BufferHomes{});
  }
  return layers;
}

}  // namespace

TEST_CASE("unshard and reshard are idempotent: a repeated transition submits nothing", "[step_walk]") {
  Session session;
  RecordingModel model({37, 101, 53});
  std::vector<LayerBuffers> layers = one_rank_layers(model, ParamOffload::cpu);
  REQUIRE(layers.front().plan.param_access() == ParamAccess::fetched_per_use);
  MemoryLedger ledger;
  StepWalk walk(model, layers, ZeroOptions{.stage = 0, .prefetch_depth = 2}, nullptr, ledger);
  const std::int64_t bytes0 = 37 * 4, bytes1 = 101 * 4;

  walk.unshard(0, "fwd");
  walk.unshard(0, "fwd");  // already unsharded
  walk.unshard(1, "fwd");
  session.wait_all();
  CHECK(ledger.live(MemoryCategory::temporaries) == bytes0 + bytes1);
  CHECK(ledger.peak_items(MemoryCategory::temporaries) == 2);

  walk.reshard(0, "fwd");
  walk.reshard(0, "fwd");  // already resharded
  session.wait_all();
  CHECK(ledger.live(MemoryCategory::temporaries) == bytes1);

  walk.reshard(1, "fwd");
  walk.reshard(2, "fwd");  // never unsharded
  session.wait_all();
  CHECK(ledger.live(MemoryCategory::temporaries) == 0);
  CHECK(ledger.peak_items(MemoryCategory::temporaries) == 2);
}

TEST_CASE("resident parameters have no transition: unshard and reshard submit nothing", "[step_walk]") {
  Session session;
  RecordingModel model({37, 101});
  std::vector<LayerBuffers> layers = one_rank_layers(model, ParamOffload::none);
  REQUIRE(layers.front().plan.param_access() == ParamAccess::resident);
  MemoryLedger ledger;
  StepWalk walk(model, layers, ZeroOptions{}, nullptr, ledger);
  walk.unshard(0, "fwd");
  walk.forward();
  walk.reshard(0, "fwd");
  session.wait_all();
  CHECK(ledger.peak(MemoryCategory::temporaries) == 0);
  CHECK(ledger.peak_items(MemoryCategory::temporaries) == 0);
  CHECK(model.calls == std::vector<std::string>{"fwd0", "fwd1"});
}

TEST_CASE("a step's walks visit the layers forward then backward, each unsharded and resharded", "[step_walk]") {
  Session session;
  RecordingModel model({37, 101, 53, 11});
  std::vector<LayerBuffers> layers = one_rank_layers(model, ParamOffload::cpu);
  MemoryLedger ledger;
  StepWalk walk(model, layers, ZeroOptions{.stage = 0, .prefetch_depth = 1}, nullptr, ledger);
  std::vector<int> reduced;
  walk.forward();
  walk.backward(true, true, [&](int group) { reduced.push_back(group); });
  session.wait_all();
  CHECK(model.calls == std::vector<std::string>{"fwd0", "fwd1", "fwd2", "fwd3", "bwd3", "bwd2", "bwd1", "bwd0"});
  CHECK(reduced == std::vector<int>{3, 2, 1, 0});
  // Every layer was resharded after its tasks, and the window held at most depth + 1 layers.
  CHECK(ledger.live(MemoryCategory::temporaries) == 0);
  CHECK(ledger.peak_items(MemoryCategory::temporaries) >= 1);
  CHECK(ledger.peak_items(MemoryCategory::temporaries) <= 2);
  // A second walk starts again from sharded layers: the same calls, nothing left behind.
  model.calls.clear();
  walk.forward();
  session.wait_all();
  CHECK(model.calls == std::vector<std::string>{"fwd0", "fwd1", "fwd2", "fwd3"});
  CHECK(ledger.live(MemoryCategory::temporaries) == 0);
}
