// With a trace directory, a small run leaves an FxT trace that converts to paje.trace, and ViTE
// parses it headlessly with 0 errors.
#include <catch2/catch.hpp>

#include <unistd.h>
#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>

#include "runtime/session.hpp"
#include "runtime/tensor.hpp"
#include "runtime/trace.hpp"
#include "tasks/elementwise.hpp"

using namespace starzero;
namespace fs = std::filesystem;

namespace {

std::string run_command(const std::string& command, int& status) {
  std::string output;
  FILE* pipe = popen(command.c_str(), "r");
  REQUIRE(pipe != nullptr);
  std::array<char, 4096> buffer{};
  while (std::fgets(buffer.data(), int(buffer.size()), pipe)) output += buffer.data();
  status = pclose(pipe);
  return output;
}

}  // namespace

TEST_CASE("a traced run converts to paje.trace that ViTE parses with 0 errors", "[trace]") {
  const fs::path dir = fs::temp_directory_path() / ("starzero-trace-test-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  std::string fxt_file;
  {
    SessionOptions options;
    options.policy = "dmda";
    options.cuda_workers = 0;
    options.trace_dir = dir.string();
    Session session(options);
    fxt_file = session.trace_file();
    Tensor a = Tensor::host(DType::f32, 4096, "a");
    Tensor b = Tensor::host(DType::f32, 4096, "b");
    {
      auto va = a.view(Access::write);
      auto vb = b.view(Access::write);
      for (std::size_t i = 0; i < 4096; ++i) {
        va.as<float>()[i] = float(i % 7);
        vb.as<float>()[i] = 1.0f;
      }
    }
    for (int layer = 0; layer < 8; ++layer) {
      tasks::submit_axpy(0.5f, a, b, "axpy[layer " + std::to_string(layer) + "]");
      tasks::submit_scale(0.9f, a, "scale[layer " + std::to_string(layer) + "]");
    }
    session.wait_all();
  }  // shutdown writes the FxT file
  REQUIRE(fs::exists(fxt_file));
  CHECK(fs::file_size(fxt_file) > 0);

  const fs::path out = dir / "converted";
  convert_fxt_trace(fxt_file, out.string());
  const fs::path paje = out / "paje.trace";
  REQUIRE(fs::exists(paje));
  std::stringstream content;
  content << std::ifstream(paje).rdbuf();
  // The task names given at submission reach the trace.
  // Blanks in task names would break the Paje format: they were replaced.
  CHECK(content.str().find("axpy[layer_3]") != std::string::npos);

  int status = 0;
  const std::string vite_output = run_command("cd '" + out.string() +
                                                  "' && QT_QPA_PLATFORM=offscreen timeout 120 vite -f paje.trace -e "
                                                  "out.svg 2>&1",
                                              status);
  INFO(vite_output);
  CHECK(status == 0);
  std::smatch match;
  REQUIRE(std::regex_search(vite_output, match, std::regex(R"((\d+) errors? and (\d+) warnings?)")));
  CHECK(match[1] == "0");
  CHECK(fs::exists(out / "out.svg"));
  if (match[1] == "0") fs::remove_all(dir);  // keep the evidence when ViTE complains
}

TEST_CASE("converting a missing or empty FxT file is an error", "[trace]") {
  const fs::path dir = fs::temp_directory_path() / ("starzero-trace-bad-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  CHECK_THROWS(convert_fxt_trace((dir / "nope").string(), (dir / "out").string()));
  std::ofstream(dir / "empty").close();
  CHECK_THROWS(convert_fxt_trace((dir / "empty").string(), (dir / "out").string()));
  fs::remove_all(dir);
}
