#include "apps/command.hpp"

#include <cstdio>
#include <stdexcept>
#include <string_view>

#include "models/gpt_files.hpp"
#include "runtime/session.hpp"

namespace starzero {

int run_command(const CommandHelp& help, cli::ArgParser& parser, int argc, char** argv,
                const std::function<int(const cli::ArgParser&)>& run) {
  const auto one_line = [](const char* what) { return cli::printable(what, std::string_view::npos); };
  const auto error = [&](const char* what) {
    std::fprintf(stderr, "%s: error: %s\n", help.name.c_str(), one_line(what).c_str());
    return 2;
  };
  try {
    parser.parse(argc, argv);
    if (parser.flag_set("help")) {
      std::string text = "usage: " + help.usage + "\n\n";
      if (!help.description.empty()) text += help.description + "\n";
      text += "options:\n" + parser.options_help();
      if (!help.examples.empty()) text += "\nexamples:\n" + help.examples;
      std::fputs(text.c_str(), stdout);
      return std::fflush(stdout) == 0 ? 0 : 1;
    }
    if (parser.value("sched") == "help") {
      // `--sched help`: the policies (with those of a --sched-plugin), then stop.
      if (const auto plugin = parser.value("sched-plugin")) register_policy_plugin(*plugin);
      std::fputs(scheduling_policies_help().c_str(), stdout);
      return std::fflush(stdout) == 0 ? 0 : 1;
    }
    return run(parser);
  } catch (const UsageError& e) {
    return error(e.what());
  } catch (const FileFormatError& e) {
    return error(e.what());
  } catch (const std::invalid_argument& e) {
    return error(e.what());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: failed: %s\n", help.name.c_str(), one_line(e.what()).c_str());
    return 1;
  }
}

}  // namespace starzero
