// Byte tokenizer, TokenDataset splits and batches (checked against the raw token vector), and
// datasets built from real text files and token shards.
#include <unistd.h>

#include <atomic>
#include <catch2/catch.hpp>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <random>
#include <set>
#include <string>
#include <vector>
#include "tests/temp_dir.hpp"

#include "models/data.hpp"
#include "models/gpt_files.hpp"

using namespace starzero;
namespace fs = std::filesystem;
using Catch::Matchers::Contains;

using starzero::testing::TempDir;

namespace {

void write_text(const fs::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(text.data(), std::streamsize(text.size()));
  REQUIRE(out);
}

// Tokens 0, 1, 2, ... : every token names its own position, so a batch shows where it came from.
TokenDataset iota_dataset(std::size_t n, double validation_fraction = 0.1) {
  std::vector<int> tokens(n);
  std::iota(tokens.begin(), tokens.end(), 0);
  return TokenDataset(std::move(tokens), int(n), validation_fraction);
}

std::string all_bytes_text() {
  std::string text;
  for (int round = 0; round < 3; ++round)
    for (int b = 0; b < 256; ++b) text.push_back(static_cast<char>(b));
  std::mt19937 rng(7);
  for (int i = 0; i < 1000; ++i) text.push_back(static_cast<char>(rng() & 0xFF));
  return text;
}

}  // namespace

TEST_CASE("byte tokenizer round trips every byte value", "[data]") {
  const std::string text = all_bytes_text();
  const std::vector<int> tokens = encode_bytes(text);
  REQUIRE(tokens.size() == text.size());
  for (std::size_t i = 0; i < text.size(); ++i) CHECK(tokens[i] == int(static_cast<unsigned char>(text[i])));
  CHECK(tokens[0] == 0);
  CHECK(tokens[255] == 255);
  CHECK(decode_bytes(tokens) == text);
  CHECK(encode_bytes("").empty());
  CHECK(decode_bytes({}).empty());

  const std::vector<int> bad = {65, 256};
  CHECK_THROWS_AS(decode_bytes(bad), std::invalid_argument);
  const std::vector<int> negative = {-1};
  CHECK_THROWS_AS(decode_bytes(negative), std::invalid_argument);
}

TEST_CASE("TokenDataset: split sizes", "[data]") {
  const TokenDataset d = iota_dataset(1000);
  CHECK(d.vocab() == 1000);
  CHECK(d.split_size(Split::train) == 900);
  CHECK(d.split_size(Split::validation) == 100);
  const auto train = d.split_tokens(Split::train);
  const auto validation = d.split_tokens(Split::validation);
  CHECK(train.front() == 0);
  CHECK(train.back() == 899);
  CHECK(validation.front() == 900);
  CHECK(validation.back() == 999);

  CHECK(iota_dataset(10, 0.25).split_size(Split::validation) == 2);  // floor(2.5)
  CHECK(iota_dataset(10, 0.0).split_size(Split::train) == 10);
  CHECK(iota_dataset(10, 0.0).split_size(Split::validation) == 0);
  CHECK_THROWS_AS(iota_dataset(10, 1.0), std::invalid_argument);
  CHECK_THROWS_AS(iota_dataset(10, -0.1), std::invalid_argument);
}

TEST_CASE("TokenDataset: train batches are a function of (seed, step) only", "[data]") {
  const int B = 4, T = 16;
  const TokenDataset d = iota_dataset(10000);
  const TokenDataset twin = iota_dataset(10000);  // another object: nothing depends on call history

  const Batch a = d.train_batch(B, T, 1234, 7);
  (void)d.train_batch(B, T, 1234, 8);  // an unrelated call in between changes nothing
  const Batch b = twin.train_batch(B, T, 1234, 7);
  CHECK(a.inputs == b.inputs);
  CHECK(a.targets == b.targets);
  CHECK(d.train_batch(B, T, 1234, 7).inputs == a.inputs);
  CHECK(d.train_batch(B, T, 1234, 8).inputs != a.inputs);
  CHECK(d.train_batch(B, T, 1235, 7).inputs != a.inputs);
}

TEST_CASE("TokenDataset: train batch rows are consecutive train tokens, targets shifted by one", "[data]") {
  const int B = 8, T = 32;
  const TokenDataset d = iota_dataset(5000);
  const std::size_t train = d.split_size(Split::train);
  const auto tokens = d.tokens();
  std::set<int> offsets;
  for (std::uint64_t step = 0; step < 200; ++step) {
    const Batch batch = d.train_batch(B, T, 99, step);
    REQUIRE(batch.inputs.size() == std::size_t(B * T));
    REQUIRE(batch.targets.size() == std::size_t(B * T));
    for (int row = 0; row < B; ++row) {
      const std::size_t offset = std::size_t(batch.inputs[std::size_t(row * T)]);
      offsets.insert(int(offset));
      REQUIRE(offset + T + 1 <= train);  // the last target is still a train token
      for (int t = 0; t < T; ++t) {
        const std::size_t i = std::size_t(row * T + t);
        REQUIRE(batch.inputs[i] == tokens[offset + std::size_t(t)]);
        REQUIRE(batch.targets[i] == tokens[offset + std::size_t(t) + 1]);
      }
    }
  }
  CHECK(offsets.size() > 1000);  // 1600 draws over 4468 offsets: spread out

  // Same on byte tokens: targets are the next byte of the raw vector.
  const TokenDataset bytes(encode_bytes(all_bytes_text()), kByteVocab);
  const Batch bb = bytes.train_batch(2, 8, 5, 5);
  for (std::size_t i = 0; i + 1 < bb.inputs.size(); ++i)
    if ((i + 1) % 8 != 0) CHECK(bb.targets[i] == bb.inputs[i + 1]);
}

TEST_CASE("TokenDataset: sequential batches cover exactly llm.c's ranges", "[data]") {
  const int B = 2, T = 8;
  const std::size_t BT = 16;
  const TokenDataset d = iota_dataset(1000);  // train [0, 900), validation [900, 1000)
  CHECK(d.sequential_batches(B, T, Split::train) == (900 - 1) / BT);
  CHECK(d.sequential_batches(B, T, Split::validation) == (100 - 1) / BT);

  for (Split split : {Split::train, Split::validation}) {
    const int base = split == Split::train ? 0 : 900;
    const std::size_t count = d.sequential_batches(B, T, split);
    for (std::size_t b = 0; b < count; ++b) {
      const Batch batch = d.sequential_batch(B, T, b, split);
      // Batch b is tokens [b·B·T, b·B·T + B·T] of the split.
      for (std::size_t i = 0; i < BT; ++i) {
        REQUIRE(batch.inputs[i] == base + int(b * BT + i));
        REQUIRE(batch.targets[i] == base + int(b * BT + i + 1));
      }
    }
    CHECK_THROWS_AS(d.sequential_batch(B, T, count, split), std::out_of_range);
  }

  // Exactly B·T + 1 tokens is one batch; B·T is none.
  const TokenDataset exact = iota_dataset(17, 0.0);
  CHECK(exact.sequential_batches(B, T, Split::train) == 1);
  CHECK(exact.sequential_batch(B, T, 0, Split::train).targets.back() == 16);
  const TokenDataset short_by_one = iota_dataset(16, 0.0);
  CHECK(short_by_one.sequential_batches(B, T, Split::train) == 0);
  CHECK_THROWS_AS(short_by_one.sequential_batch(B, T, 0, Split::train), std::invalid_argument);
}

TEST_CASE("TokenDataset: empty or too-short data is rejected with the numbers", "[data]") {
  CHECK_THROWS_WITH(TokenDataset({}, 256), Contains("empty"));
  CHECK_THROWS_WITH(TokenDataset(std::vector<int>{1, 2, 300}, 256), Contains("300"));

  const TokenDataset d = iota_dataset(40);  // train 36, validation 4
  CHECK_THROWS_WITH(d.train_batch(4, 16, 0, 0), Contains("36") && Contains("65") && Contains("train"));
  CHECK_THROWS_WITH(d.sequential_batch(2, 2, 0, Split::validation), Contains("4 tokens") && Contains("5"));
  CHECK_THROWS_AS(d.train_batch(0, 4, 0, 0), std::invalid_argument);
  CHECK_THROWS_AS(d.train_batch(2, -1, 0, 0), std::invalid_argument);
  CHECK_NOTHROW(d.train_batch(5, 7, 0, 0));  // 36 >= 5·7 + 1
  CHECK_THROWS_AS(d.train_batch(5, 8, 0, 0), std::invalid_argument);
}

TEST_CASE("TokenDataset: from text files and llm.c token shards", "[data]") {
  TempDir dir;
  const std::string one = std::string("hello\0world", 11) + "\xff\x01";
  const std::string two = "second file\n";
  write_text(dir / "one.txt", one);
  write_text(dir / "two.txt", two);

  const TokenDataset single = TokenDataset::from_text_file(dir / "one.txt", 0.0);
  CHECK(single.vocab() == 256);
  CHECK(decode_bytes(single.tokens()) == one);

  const std::vector<fs::path> files = {dir / "one.txt", dir / "two.txt"};
  const TokenDataset joined = TokenDataset::from_text_files(files);
  CHECK(decode_bytes(joined.tokens()) == one + "\n" + two);
  CHECK(joined.split_size(Split::validation) == (one.size() + 1 + two.size()) / 10);

  CHECK_THROWS_AS(TokenDataset::from_text_file(dir / "missing.txt"), FileFormatError);
  write_text(dir / "empty.txt", "");
  CHECK_THROWS_AS(TokenDataset::from_text_file(dir / "empty.txt"), std::invalid_argument);

  std::vector<std::uint16_t> shard(500);
  for (std::size_t i = 0; i < shard.size(); ++i) shard[i] = std::uint16_t((i * 101) % 50257);
  shard[3] = 50256;
  GptTokenShardFile::write(dir / "shard.bin", shard);
  const TokenDataset from_shard = TokenDataset::from_token_shard(dir / "shard.bin");
  CHECK(from_shard.vocab() == 50257);
  REQUIRE(from_shard.tokens().size() == shard.size());
  for (std::size_t i = 0; i < shard.size(); ++i) CHECK(from_shard.tokens()[i] == int(shard[i]));
  CHECK(from_shard.split_size(Split::validation) == 50);

  shard[10] = 50257;  // not a GPT-2 token
  GptTokenShardFile::write(dir / "bad_shard.bin", shard);
  CHECK_THROWS_WITH(TokenDataset::from_token_shard(dir / "bad_shard.bin"), Contains("bad_shard.bin"));
  GptTokenShardFile::write(dir / "empty_shard.bin", {});
  CHECK_THROWS_AS(TokenDataset::from_token_shard(dir / "empty_shard.bin"), std::invalid_argument);
  CHECK_THROWS_AS(TokenDataset::from_token_shard(dir / "missing.bin"), FileFormatError);
}
