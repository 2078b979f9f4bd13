#include <catch2/catch.hpp>

#include <algorithm>
#include <string>

#include "runtime/session.hpp"
#include "runtime/tensor.hpp"
#include "runtime/topology.hpp"
#include "tasks/elementwise.hpp"

using namespace starzero;

TEST_CASE("StarPU 1.3.10 offers the scheduling policies docs/toolchain.md lists", "[session]") {
  const auto policies = scheduling_policies();
  for (const char* name : {"eager", "prio", "random", "ws", "lws", "dm", "dmda", "dmdas", "heteroprio", "peager"})
    CHECK(std::find(policies.begin(), policies.end(), name) != policies.end());
}

TEST_CASE("sessions start and stop under several policies and run a task", "[session]") {
  for (const char* policy : {"eager", "lws", "ws", "prio", "dmda", "dmdas", "random"}) {
    CAPTURE(policy);
    SessionOptions options;
    options.policy = policy;
    options.cpu_workers = 2;
    options.cuda_workers = 0;
    Session session(options);
    CHECK(session.policy() == policy);
    CHECK(session.cpu_workers() == 2);
    CHECK(session.cuda_workers() == 0);
    // Within one session a task really runs: 3 * (1.5 + 2 * 0.25)
    Tensor x = Tensor::host(DType::f32, 5, "x");
    Tensor y = Tensor::host(DType::f32, 5, "y");
    {
      auto hx = x.view(Access::write);
      auto hy = y.view(Access::write);
      std::fill(hx.as<float>().begin(), hx.as<float>().end(), 0.25f);
      std::fill(hy.as<float>().begin(), hy.as<float>().end(), 1.5f);
    }
    tasks::submit_axpy(2.0f, x, y);
    tasks::submit_scale(3.0f, y);
    session.wait_all();
    auto hy = y.view(Access::read);
    for (float v : hy.as<float>()) CHECK(v == 6.0f);
  }
}

TEST_CASE("an unknown policy is rejected with the list of valid ones", "[session]") {
  SessionOptions options;
  options.policy = "fastest-please";
  try {
    Session session(options);
    FAIL("Session accepted an unknown policy");
  } catch (const std::invalid_argument& e) {
    const std::string message = e.what();
    CHECK(message.find("fastest-please") != std::string::npos);
    CHECK(message.find("dmdas") != std::string::npos);
    CHECK(message.find("lws") != std::string::npos);
  }
  // The failed attempt left nothing behind: a valid session starts afterwards.
  options.policy = "eager";
  options.cuda_workers = 0;
  Session session(options);
  CHECK(session.policy() == "eager");
}

TEST_CASE("a second concurrent session is refused", "[session]") {
  SessionOptions options;
  options.cuda_workers = 0;
  Session first(options);
  CHECK_THROWS_AS(Session(options), std::logic_error);
}

TEST_CASE("negative worker counts are rejected", "[session]") {
  SessionOptions options;
  options.cpu_workers = -5;
  CHECK_THROWS_AS(Session(options), std::invalid_argument);
}

TEST_CASE("hwloc topology reports this machine", "[topology]") {
  const Topology topo = Topology::discover();
  CHECK(topo.cores >= 1);
  CHECK(topo.hardware_threads >= topo.cores);
  CHECK(topo.numa_nodes >= 1);
  REQUIRE(topo.cores_per_numa.size() == std::size_t(topo.numa_nodes));
  std::size_t cores_listed = 0;
  for (const auto& cores : topo.cores_per_numa) cores_listed += cores.size();
  CHECK(cores_listed == std::size_t(topo.cores));
  for (const auto& gpu : topo.gpus) CHECK(gpu.numa_node < topo.numa_nodes);
  CHECK_FALSE(topo.describe().empty());
}
