#pragma once
// What every `starzero` sub-command does around its own work: parse the flags, answer --help,
// and turn exceptions into the exit codes of apps/commands.hpp — bad input (a bad flag, a
// malformed file, an invalid argument) prints "<name>: error: ..." and returns 2, any other
// failure "<name>: failed: ..." and returns 1.
#include <functional>
#include <string>

#include "apps/cli.hpp"

namespace starzero {

// `name` is how messages name the command ("starzero train"); `usage` is the help's first line
// after "usage: " (e.g. "starzero train [options]"). The parser must register a "help" flag.
int run_command(const std::string& name, const std::string& usage, cli::ArgParser& parser, int argc, char** argv,
                const std::function<int(const cli::ArgParser&)>& run);

}  // namespace starzero
