#include "apps/command.hpp"

#include <cstdio>
#include <stdexcept>

#include "models/llmc_files.hpp"

namespace starzero {

int run_command(const std::string& name, const std::string& usage, cli::ArgParser& parser, int argc, char** argv,
                const std::function<int(const cli::ArgParser&)>& run) {
  const auto error = [&](const char* what) {
    std::fprintf(stderr, "%s: error: %s\n", name.c_str(), what);
    return 2;
  };
  try {
    parser.parse(argc, argv);
    if (parser.flag_set("help")) {
      std::printf("usage: %s\n\noptions:\n%s", usage.c_str(), parser.options_help().c_str());
      return 0;
    }
    return run(parser);
  } catch (const UsageError& e) {
    return error(e.what());
  } catch (const FileFormatError& e) {
    return error(e.what());
  } catch (const std::invalid_argument& e) {
    return error(e.what());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: failed: %s\n", name.c_str(), e.what());
    return 1;
  }
}

}  // namespace starzero
