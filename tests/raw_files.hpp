#pragma once
// Test helpers for file formats: a file's raw bytes read, written and patched independently of
// the readers under test, bit-exact float comparison, and the check that a reader rejects a file
// with a FileFormatError naming it.
#include <catch2/catch.hpp>
#include <cstddef>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <string>
#include <vector>

#include "runtime/files.hpp"

namespace starzero::testing {

inline std::vector<char> read_raw(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  REQUIRE(in);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

inline void write_raw(const std::filesystem::path& path, const std::vector<char>& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), std::streamsize(bytes.size()));
  REQUIRE(out);
}

template <class T>
T raw_at(const std::vector<char>& bytes, std::size_t offset) {
  REQUIRE(offset + sizeof(T) <= bytes.size());
  T value;
  std::memcpy(&value, bytes.data() + offset, sizeof value);
  return value;
}

template <class T>
void set_raw(std::vector<char>& bytes, std::size_t offset, T value) {
  REQUIRE(offset + sizeof(T) <= bytes.size());
  std::memcpy(bytes.data() + offset, &value, sizeof value);
}

// Writes `bytes` to `path` after `patch` has changed them (a corrupted copy of a good file).
inline void write_patched(const std::filesystem::path& path, std::vector<char> bytes,
                          const std::function<void(std::vector<char>&)>& patch) {
  patch(bytes);
  write_raw(path, bytes);
}

// The same floats bit for bit (NaN payloads and signed zeros included).
inline bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  // memcmp must not see the null data() of an empty vector, even for 0 bytes.
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

// Runs `fn`, requires a FileFormatError whose message names the file and contains `what`.
inline void require_format_error(const std::function<void()>& fn, const std::filesystem::path& file,
                                 const std::string& what) {
  try {
    fn();
    FAIL("expected FileFormatError mentioning \"" << what << "\" for " << file);
  } catch (const FileFormatError& e) {
    const std::string msg = e.what();
    INFO("message: " << msg);
    CHECK(msg.find(file.filename().string()) != std::string::npos);
    CHECK(msg.find(what) != std::string::npos);
  }
}

}  // namespace starzero::testing
