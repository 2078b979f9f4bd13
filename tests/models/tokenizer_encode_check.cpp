// Checks Tokenizer::encode (models/tokenizer.hpp) against encodings computed elsewhere
// (tests/models/bpe_reference.py): each line of CASES is a JSON object {"hex": the text's bytes in hex,
// "ids": the expected ids}; every text must encode to its ids and decode back to its bytes.
// Usage: tokenizer_encode_check TOKENIZER CASES. Prints one line per failure and a summary line;
// exit 1 on any failure.
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "models/tokenizer.hpp"

namespace {

std::string from_hex(const std::string& hex) {
  std::string out;
  for (std::size_t i = 0; i + 1 < hex.size(); i += 2) out.push_back(char(std::stoi(hex.substr(i, 2), nullptr, 16)));
  return out;
}

std::string ids_text(const std::vector<int>& ids) {
  std::string s;
  for (int id : ids) s += (s.empty() ? "" : " ") + std::to_string(id);
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::cerr << "usage: tokenizer_encode_check TOKENIZER CASES\n";
    return 2;
  }
  const starzero::Tokenizer tokenizer = starzero::Tokenizer::load(argv[1]);
  std::ifstream cases(argv[2]);
  std::string line;
  int passed = 0, failed = 0;
  while (std::getline(cases, line)) {
    const nlohmann::json c = nlohmann::json::parse(line);
    const std::string text = from_hex(c.at("hex").get<std::string>());
    const std::vector<int> expected = c.at("ids").get<std::vector<int>>(), got = tokenizer.encode(text);
    const bool ok = got == expected && tokenizer.decode(got) == text;
    if (!ok)
      std::cout << "FAIL " << nlohmann::json(c.at("hex")).dump() << "\n  expected " << ids_text(expected) << "\n  got      "
                << ids_text(got) << (tokenizer.decode(got) == text ? "" : " (does not decode to the text)") << "\n";
    (ok ? passed : failed)++;
  }
  std::cout << argv[2] << ": " << passed << " passed, " << failed << " failed\n";
  return failed == 0 && passed > 0 ? 0 : 1;
}
