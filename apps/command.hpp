#pragma once
// What every `starzero` sub-command does around its own work: parse the flags, answer --help,
// and turn exceptions into the exit codes of apps/commands.hpp — bad input (a bad flag, a
// malformed file, an invalid argument) prints "<name>: error: ..." and returns 2, any other
// failure "<name>: failed: ..." and returns 1.
#include <functional>
#include <string>

#include "apps/cli.hpp"

namespace starzero {

// What --help prints: "usage: <usage>", the description, the parser's options, the examples.
struct CommandHelp {
  std::string name;              // how messages name the command: "starzero train"
  std::string usage;             // the help's first line after "usage: ": "starzero train [options]"
  std::string description = {};  // paragraphs between the usage line and the options; may be empty
  std::string examples = {};     // lines after the options; may be empty
};

// The parser must register a "help" flag. Error messages are cut to one line (cli::printable).
int run_command(const CommandHelp& help, cli::ArgParser& parser, int argc, char** argv,
                const std::function<int(const cli::ArgParser&)>& run);

}  // namespace starzero
