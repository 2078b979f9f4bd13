// models/safetensors.hpp and the layout changes of models/hf_checkpoint.hpp, host-side: fp16
// widening against ldexp, narrowing by nearest even, a written file read back, and the rotary row
// permutation against transformers' view/transpose written out as loops.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <fstream>

#include "models/hf_checkpoint.hpp"
#include "models/safetensors.hpp"
#include "tests/temp_dir.hpp"

using namespace starzero;

namespace {

// IEEE half by its definition: (-1)^s · 2^(e-15) · (1 + m/1024), subnormals 2^-14 · m/1024.
double half_by_definition(std::uint16_t h) {
  const int s = h >> 15, e = (h >> 10) & 0x1f, m = h & 0x3ff;
  const double sign = s ? -1.0 : 1.0;
  if (e == 0) return sign * std::ldexp(double(m) / 1024.0, -14);
  if (e == 31) return m ? NAN : sign * INFINITY;
  return sign * std::ldexp(1.0 + double(m) / 1024.0, e - 15);
}

}  // namespace

TEST_CASE("fp16 widens exactly and narrows back", "[safetensors]") {
  for (std::uint32_t h = 0; h < 65536; ++h) {
    const double want = half_by_definition(std::uint16_t(h));
    const float got = half_to_float(std::uint16_t(h));
    if (std::isnan(want)) {
      REQUIRE(std::isnan(got));
      continue;
    }
    REQUIRE(double(got) == want);
    REQUIRE(float_to_half(got) == h);
  }
  // Halfway between 1 and 1 + 2^-10 rounds to even (1); just above it rounds up.
  REQUIRE(float_to_half(1.0f + 0x1p-11f) == 0x3c00);
  REQUIRE(float_to_half(1.0f + 0x1p-11f + 0x1p-20f) == 0x3c01);
  REQUIRE(float_to_half(65520.0f) == 0x7c00);
  REQUIRE(float_to_half(65519.0f) == 0x7bff);
}

TEST_CASE("a written safetensors file reads back", "[safetensors]") {
  testing::TempDir dir("safetensors");
  const std::vector<SafeTensorSpec> specs = {
      {"a", SafeDType::f32, {2, 3}}, {"b", SafeDType::bf16, {4}}, {"c", SafeDType::f16, {3}}};
  write_safetensors(dir / "m.safetensors", specs, {{"format", "pt"}}, [](std::size_t i, std::span<float> v) {
    for (std::size_t k = 0; k < v.size(); ++k) v[k] = float(i * 10 + k) * 0.5f;
  });
  const SafetensorsFile file(dir / "m.safetensors");
  REQUIRE(file.tensors().size() == 3);
  REQUIRE(file.metadata().at("format") == "pt");
  for (std::size_t i = 0; i < 3; ++i) {
    const SafeTensorInfo* t = file.find(specs[i].name);
    REQUIRE(t);
    REQUIRE(t->shape == specs[i].shape);
    std::vector<float> v(t->count());
    file.read(*t, v);
    for (std::size_t k = 0; k < v.size(); ++k) REQUIRE(v[k] == float(i * 10 + k) * 0.5f);
  }
  // The header is padded to 8 bytes and the data follows it.
  std::ifstream in(dir / "m.safetensors", std::ios::binary);
  std::uint64_t n = 0;
  in.read(reinterpret_cast<char*>(&n), 8);
  REQUIRE(n % 8 == 0);
  REQUIRE(std::filesystem::file_size(dir / "m.safetensors") == 8 + n + 6 * 4 + 4 * 2 + 3 * 2);
}

TEST_CASE("HF's q/k row permutation and the transpose, both ways", "[safetensors]") {
  const std::size_t heads = 2, hs = 6, cols = 3, rows = heads * hs;
  std::vector<float> meta(rows * cols);
  for (std::size_t k = 0; k < meta.size(); ++k) meta[k] = float(k);
  // transformers: w.view(heads, hs/2, 2, cols).transpose(1, 2).reshape(rows, cols).
  std::vector<float> hf;
  for (std::size_t h = 0; h < heads; ++h)
    for (std::size_t j = 0; j < 2; ++j)
      for (std::size_t i = 0; i < hs / 2; ++i)
        for (std::size_t c = 0; c < cols; ++c) hf.push_back(meta[(h * hs + 2 * i + j) * cols + c]);
  const HfTensorMap rope{"q", {rows, cols}, 1, 0, rows * cols, HfTransform::rope_rows, int(heads)};
  std::vector<float> engine(rows * cols), back(rows * cols);
  hf_to_engine(rope, hf, engine);
  REQUIRE(engine == meta);
  engine_to_hf(rope, engine, back);
  REQUIRE(back == hf);
  // Conv1D [in=2, out=3] is llm.c's [3, 2]; a padded region gets zeros.
  const HfTensorMap conv{"w", {2, 3}, 1, 0, 8, HfTransform::transpose, 0};
  const std::vector<float> w = {1, 2, 3, 4, 5, 6};
  std::vector<float> region(8, -1.0f), w_back(6);
  hf_to_engine(conv, w, region);
  REQUIRE(region == std::vector<float>{1, 4, 2, 5, 3, 6, 0, 0});
  engine_to_hf(conv, region, w_back);
  REQUIRE(w_back == w);
}
