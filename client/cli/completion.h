// Shell completion for ktune, generated from the CLI11 App itself: every subcommand (nested ones
// too), its options, the choices an IsMember check lists, and file names where an option takes a
// file. Nothing is written by hand per command, so the script cannot drift from the CLI.
// Pure functions of the App; the App must be fully built (all subcommands added) first.
#pragma once

#include <CLI/CLI.hpp>

#include <string>

namespace ktune::cli {

enum class Shell { bash, zsh };

// A script that, sourced, completes PROGRAM (e.g. "ktune"): defines _ktune and registers it.
// zsh gets the bash script behind bashcompinit.
std::string completion_script(const CLI::App& app, const std::string& program, Shell shell);

}  // namespace ktune::cli
