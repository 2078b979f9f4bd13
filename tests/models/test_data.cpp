// Byte tokenizer, TokenDataset splits and batches (checked against the raw token vector), and
// datasets built from real text files and token shards.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
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
#include "models/mask_shard.hpp"

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

std::vector<int> split_tokens(const TokenDataset& d, Split split) {
  return d.read_split(split, 0, d.split_size(split));
}

TEST_CASE("TokenDataset: split sizes", "[data]") {
  const TokenDataset d = iota_dataset(1000);
  CHECK(d.vocab() == 1000);
  CHECK(d.split_size(Split::train) == 900);
  CHECK(d.split_size(Split::validation) == 100);
  const auto train = split_tokens(d, Split::train);
  const auto validation = split_tokens(d, Split::validation);
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
  // Step s of B rows is the stream's samples [(s − 1)·B, s·B).
  CHECK(d.stream_batch(B, T, 1234, 6 * B).inputs == a.inputs);
}

// The windows a batch's rows start at (the iota data: a token is its own position).
std::vector<int> row_starts(const Batch& batch, int T) {
  std::vector<int> starts;
  for (std::size_t row = 0; row * std::size_t(T) < batch.inputs.size(); ++row)
    starts.push_back(batch.inputs[row * std::size_t(T)]);
  return starts;
}

TEST_CASE("TokenDataset: an epoch uses every window of T + 1 tokens once, in a seeded order", "[data]") {
  const int T = 32;
  const TokenDataset d = iota_dataset(5000);  // train [0, 4500): (4500 − 1) / 32 = 140 windows
  REQUIRE(d.windows(T, Split::train) == 140);
  for (std::uint64_t epoch = 0; epoch < 3; ++epoch) {
    std::vector<int> starts;
    for (std::uint64_t step = 0; step < 20; ++step) {  // 20 batches of 7 rows: one epoch
      const Batch batch = d.stream_batch(7, T, 99, epoch * 140 + step * 7);
      for (std::size_t i = 0; i < batch.inputs.size(); ++i) {
        REQUIRE(batch.targets[i] == batch.inputs[i] + 1);  // targets shifted by one
        REQUIRE(batch.inputs[i] == batch.inputs[i / T * T] + int(i % T));  // consecutive tokens
      }
      for (int start : row_starts(batch, T)) starts.push_back(start);
    }
    std::vector<int> sorted = starts;
    std::sort(sorted.begin(), sorted.end());
    std::vector<int> every(140);
    for (int w = 0; w < 140; ++w) every[std::size_t(w)] = w * T;
    CHECK(sorted == every);  // each window once
    std::vector<int> in_order = every;
    CHECK(starts != in_order);  // shuffled
  }
  // Another epoch, another order; another seed, another order.
  CHECK(row_starts(d.stream_batch(20, T, 99, 0), T) != row_starts(d.stream_batch(20, T, 99, 140), T));
  CHECK(row_starts(d.stream_batch(20, T, 99, 0), T) != row_starts(d.stream_batch(20, T, 100, 0), T));
}

TEST_CASE("TrainBatchStream: ranks split one stream; a resume continues it at any rank count", "[data]") {
  const int T = 16;
  const TokenDataset d = iota_dataset(20000);
  TrainBatchStream whole(d, T, 7);
  std::vector<std::vector<int>> steps;
  for (std::uint64_t step = 1; step <= 10; ++step) steps.push_back(whole.batch(step, 8).inputs);
  // Two ranks take rows [0, 4) and [4, 8) of each step's global batch: disjoint windows, and
  // together the one-rank batch (the model's rows: set_batch_rows).
  for (const std::vector<int>& inputs : steps) {
    std::set<int> rank0, rank1;
    for (int r = 0; r < 4; ++r) rank0.insert(inputs[std::size_t(r * T)]);
    for (int r = 4; r < 8; ++r) rank1.insert(inputs[std::size_t(r * T)]);
    for (int w : rank0) CHECK(rank1.count(w) == 0);
  }
  CHECK(whole.position_before(6, 8) == 40);
  // Resumed after step 5 with the recorded position: the same batches follow.
  TrainBatchStream resumed(d, T, 7);
  resumed.set_origin(5, whole.position_before(6, 8));
  for (std::uint64_t step = 6; step <= 10; ++step) CHECK(resumed.batch(step, 8).inputs == steps[step - 1]);
  // Resumed on half the ranks (G = 4): the next samples of the same stream, half a step each.
  TrainBatchStream halved(d, T, 7);
  halved.set_origin(5, 40);
  const std::vector<int> six = halved.batch(6, 4).inputs, seven = halved.batch(7, 4).inputs;
  CHECK(std::vector<int>(steps[5].begin(), steps[5].begin() + 4 * T) == six);
  CHECK(std::vector<int>(steps[5].begin() + 4 * T, steps[5].end()) == seven);
  CHECK(halved.position_before(8, 4) == 48);
  // A new origin drops the batch read ahead for the old one.
  TrainBatchStream moved(d, T, 7);
  (void)moved.batch(1, 8);  // reads step 2's batch (samples 8..15) ahead
  moved.set_origin(1, 40);
  CHECK(moved.batch(2, 8).inputs == steps[5]);  // samples 40..47
  CHECK_THROWS_AS(halved.position_before(5, 4), std::invalid_argument);
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
  CHECK_THROWS_WITH(d.train_batch(4, 16, 0, 1), Contains("36") && Contains("65") && Contains("train"));
  CHECK_THROWS_WITH(d.sequential_batch(2, 2, 0, Split::validation), Contains("4 tokens") && Contains("5"));
  CHECK_THROWS_AS(d.train_batch(0, 4, 0, 1), std::invalid_argument);
  CHECK_THROWS_AS(d.train_batch(2, -1, 0, 1), std::invalid_argument);
  CHECK_THROWS_AS(d.train_batch(2, 4, 0, 0), std::invalid_argument);  // steps count from 1
  CHECK_NOTHROW(d.train_batch(5, 7, 0, 1));  // 36 >= 5·7 + 1
  CHECK_THROWS_AS(d.train_batch(5, 8, 0, 1), std::invalid_argument);
}

TEST_CASE("TokenDataset: from text files and llm.c token shards", "[data]") {
  TempDir dir;
  const std::string one = std::string("hello\0world", 11) + "\xff\x01";
  const std::string two = "second file\n";
  write_text(dir / "one.txt", one);
  write_text(dir / "two.txt", two);

  const TokenDataset single = TokenDataset::from_text_file(dir / "one.txt", 0.0);
  CHECK(single.vocab() == 256);
  CHECK(decode_bytes(split_tokens(single, Split::train)) == one);

  const std::vector<fs::path> files = {dir / "one.txt", dir / "two.txt"};
  const TokenDataset joined = TokenDataset::from_text_files(files, 0.0);
  CHECK(decode_bytes(split_tokens(joined, Split::train)) == one + "\n" + two);
  CHECK(TokenDataset::from_text_files(files).split_size(Split::validation) == (one.size() + 1 + two.size()) / 10);

  CHECK_THROWS_AS(TokenDataset::from_text_file(dir / "missing.txt"), FileFormatError);
  write_text(dir / "empty.txt", "");
  CHECK_THROWS_AS(TokenDataset::from_text_file(dir / "empty.txt"), std::invalid_argument);

  std::vector<std::uint16_t> shard(500);
  for (std::size_t i = 0; i < shard.size(); ++i) shard[i] = std::uint16_t((i * 101) % 50257);
  shard[3] = 50256;
  GptTokenShardFile::write(dir / "shard.bin", shard);
  const TokenDataset from_shard = TokenDataset::from_token_shard(dir / "shard.bin", 0.0);
  CHECK(from_shard.vocab() == 50257);
  const std::vector<int> read = split_tokens(from_shard, Split::train);
  REQUIRE(read.size() == shard.size());
  for (std::size_t i = 0; i < shard.size(); ++i) CHECK(read[i] == int(shard[i]));
  CHECK(TokenDataset::from_token_shard(dir / "shard.bin").split_size(Split::validation) == 50);

  // A bad token is found when read (the shard is streamed), naming the file and the index.
  shard[10] = 50257;  // not a GPT-2 token
  GptTokenShardFile::write(dir / "bad_shard.bin", shard);
  const TokenDataset bad = TokenDataset::from_token_shard(dir / "bad_shard.bin", 0.0);
  CHECK_THROWS_WITH(bad.read_split(Split::train, 0, 20), Contains("bad_shard.bin") && Contains("index 10"));
  GptTokenShardFile::write(dir / "empty_shard.bin", {});
  CHECK_THROWS_WITH(TokenDataset::from_token_shard(dir / "empty_shard.bin"), Contains("empty_shard.bin") && Contains("empty"));
  CHECK_THROWS_AS(TokenDataset::from_token_shard(dir / "missing.bin"), FileFormatError);
}

// Shard k holds tokens 1000·k + i: a token tells its shard and position.
std::vector<fs::path> write_numbered_shards(const fs::path& dir, const std::vector<std::size_t>& sizes) {
  std::vector<fs::path> paths;
  for (std::size_t k = 0; k < sizes.size(); ++k) {
    std::vector<std::uint16_t> tokens(sizes[k]);
    for (std::size_t i = 0; i < sizes[k]; ++i) tokens[i] = std::uint16_t(1000 * k + i);
    char name[32];
    std::snprintf(name, sizeof name, "train_%06zu.bin", k);
    paths.push_back(dir / name);
    GptTokenShardFile::write(paths.back(), tokens);
  }
  return paths;
}

TEST_CASE("token shards: a folder or a glob, streamed; windows stay inside a shard", "[data][shards]") {
  TempDir dir;
  const std::vector<fs::path> paths = write_numbered_shards(dir.path(), {300, 170, 401});
  CHECK(data_files(dir.path().string()) == paths);
  CHECK(data_files((dir / "train_*.bin").string()) == paths);
  CHECK(data_files(paths[1].string()) == std::vector<fs::path>{paths[1]});
  CHECK_THROWS_WITH(data_files((dir / "val_*.bin").string()), Contains("no file matches"));
  CHECK_THROWS_WITH(data_files((dir / "nothing.bin").string()), Contains("no such file"));

  const TokenDataset d(token_shard_store(paths, gpt2_token_shards()), kGpt2Vocab, 0.1);
  CHECK(d.store().describe() == "3 GPT-2 token shards (871 tokens)");
  CHECK(d.split_size(Split::validation) == 87);  // cut from the last shard's end
  const int T = 16;
  // Windows: (300 − 1)/16 + (170 − 1)/16 + (401 − 87 − 1)/16 = 18 + 10 + 19.
  CHECK(d.windows(T, Split::train) == 47);
  std::set<int> starts;
  for (std::uint64_t position = 0; position < 47; position += 47) {
    const Batch batch = d.stream_batch(47, T, 3, position);
    for (std::size_t row = 0; row < 47; ++row) {
      const int first = batch.inputs[row * T], last = batch.targets[row * T + T - 1];
      CHECK(first / 1000 == last / 1000);  // one shard
      CHECK((first % 1000) % T == 0);      // at a window's start
      CHECK(last % 1000 < (first / 1000 == 2 ? 401 - 87 : 1000));  // not into the validation split
      starts.insert(first);
    }
  }
  CHECK(starts.size() == 47);  // one epoch: each window once
  // Validation: the last 87 tokens of the last shard, in order.
  const Batch v = d.sequential_batch(2, 8, 0, Split::validation);
  CHECK(v.inputs.front() == 2000 + 401 - 87);

  // --val-data: a store of its own; the whole of --data trains.
  const TokenDataset with_val(token_shard_store({paths[0], paths[1]}, gpt2_token_shards()), kGpt2Vocab, 0.1,
                              token_shard_store({paths[2]}, gpt2_token_shards()));
  CHECK(with_val.split_size(Split::train) == 470);
  CHECK(with_val.split_size(Split::validation) == 401);
  CHECK(with_val.sequential_batch(1, 8, 1, Split::validation).inputs.front() == 2008);
}

TEST_CASE("token shards: a bad header, size or mask names its file", "[data][shards]") {
  TempDir dir;
  const std::vector<fs::path> paths = write_numbered_shards(dir.path(), {100, 100});
  const auto open = [](std::vector<fs::path> p) { return token_shard_store(std::move(p), gpt2_token_shards()); };
  // Truncated: the header says 100 tokens.
  fs::copy_file(paths[1], dir / "short.bin");
  fs::resize_file(dir / "short.bin", fs::file_size(dir / "short.bin") - 3);
  CHECK_THROWS_WITH(open({paths[0], dir / "short.bin"}), Contains("short.bin"));
  // Not a token shard.
  write_text(dir / "text.bin", std::string(2000, 'x'));
  CHECK_THROWS_WITH(open({dir / "text.bin"}), Contains("text.bin"));
  CHECK_THROWS_AS(open({dir / "text.bin"}), FileFormatError);

  // A mask beside each shard: masked targets read as kMaskedTarget.
  std::vector<std::uint8_t> counted(100, 1);
  for (std::size_t i = 0; i < 50; ++i) counted[i] = 0;
  fs::path mask0 = paths[0], mask1 = paths[1];
  mask0.replace_extension(".mask");
  mask1.replace_extension(".mask");
  write_mask_shard(mask0, counted);
  CHECK_THROWS_WITH(open(paths), Contains("1 of 2") && Contains(".mask"));
  write_mask_shard(mask1, counted);
  const TokenDataset masked(open(paths), kGpt2Vocab, 0.0);
  CHECK(masked.store().has_mask());
  const Batch batch = masked.sequential_batch(4, 16, 0, Split::train);  // windows 0..3 of shard 0
  for (std::size_t i = 0; i < batch.targets.size(); ++i) {
    const int target_position = batch.inputs[i] + 1;  // shard 0: the token is its position
    CHECK(batch.targets[i] == (target_position < 50 ? kMaskedTarget : target_position));
  }
  write_mask_shard(mask1, std::vector<std::uint8_t>(99, 1));
  CHECK_THROWS_WITH(open(paths), Contains("99 mask values") && Contains("train_000001"));
}

