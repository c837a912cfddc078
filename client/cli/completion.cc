#include "client/cli/completion.h"

#include <algorithm>
#include <map>
#include <sstream>
#include <vector>

namespace ktune::cli {
namespace {

// What an option's value (or a positional) is, where CLI11 cannot say it: no IsMember check
// lists the choices (dtypes and layouts come from the templates, which the CLI does not load) or
// the value is a path. Keyed by the option's long name or the positional's name; an option not
// here and without an IsMember check takes a value we do not complete.
const std::map<std::string, std::string>& value_hints() {
  static const std::map<std::string, std::string> k_hints = {
      {"dtype", "words bf16 fp16 fp32"},
      {"out-dtype", "words bf16 fp16 fp32"},
      {"layout", "words rc rr cr cc"},
      {"arch", "words sm_80 sm_86 sm_89 sm_90 sm_90a"},
      {"output", "file"},
      {"file", "file"},
      {"table", "file"},
      {"trials", "file"},
      {"socket", "file"},
      {"templates", "dir"},
      {"data-dir", "dir"},
  };
  return k_hints;
}

// "words a b c" from a check's description "{a,b,c}" (CLI::IsMember), else "".
std::string choices(const CLI::Option& opt) {
  const std::string type = opt.get_type_name();  // e.g. TEXT:{json,yaml,yml,csv}
  const auto open = type.find('{'), close = type.find('}', open);
  if (open == std::string::npos || close == std::string::npos) return "";
  std::string words = "words";
  std::istringstream in(type.substr(open + 1, close - open - 1));
  for (std::string w; std::getline(in, w, ',');) words += " " + w;
  return words;
}

// What OPT's value completes to: "words ...", "file", "dir", "value"; "" for a flag.
std::string value_kind(const CLI::Option& opt) {
  if (opt.nonpositional() && opt.get_items_expected_max() == 0) return "";
  if (auto c = choices(opt); !c.empty()) return c;
  const std::string key = opt.get_lnames().empty()
                              ? (opt.get_positional() ? opt.get_name(true) : opt.get_name())
                              : opt.get_lnames().front();
  const auto hint = value_hints().find(key);
  return hint == value_hints().end() ? "value" : hint->second;
}

// Single-quoted for bash: the names are plain words, but a quote must not end the string.
std::string quote(const std::string& s) {
  std::string out = "'";
  for (char ch : s) out += ch == '\'' ? std::string("'\\''") : std::string(1, ch);
  return out + "'";
}

// One command of the tree: its path ("" for the program, "plan apply") and what it accepts.
struct Node {
  std::string path;
  std::vector<std::string> subcommands;
  std::vector<std::string> options;                         // -o --output ...
  std::vector<std::pair<std::string, std::string>> values;  // option name -> value kind
  std::string positional;                                   // kind of its positionals ("" none)
};

// Options of APP and, where a subcommand hands unknown options to its parent (fallthrough),
// of its ancestors too: `ktune lookup ... --json` is valid, so --json completes there.
void add_options(const CLI::App& app, Node& node) {
  for (const CLI::Option* opt : app.get_options({})) {
    const std::string kind = value_kind(*opt);
    if (!opt->nonpositional()) {
      if (kind != "value" && node.positional.empty()) node.positional = kind;
      continue;
    }
    std::vector<std::string> names;
    for (const auto& s : opt->get_snames()) names.push_back("-" + s);
    for (const auto& l : opt->get_lnames()) names.push_back("--" + l);
    for (const auto& n : names) {
      // The subcommand's own option wins over an ancestor's of the same name (-h, --device).
      if (std::find(node.options.begin(), node.options.end(), n) != node.options.end()) continue;
      node.options.push_back(n);
      if (!kind.empty()) node.values.emplace_back(n, kind);
    }
  }
  if (app.get_fallthrough() && app.get_parent() != nullptr) {
    const std::string own_positional = node.positional;
    add_options(*app.get_parent(), node);
    node.positional = own_positional;  // a parent's positionals are not this command's
  }
}

void walk(const CLI::App& app, const std::string& path, std::vector<Node>& nodes) {
  Node node;
  node.path = path;
  add_options(app, node);
  const auto subs = app.get_subcommands([](const CLI::App* s) { return !s->get_name().empty(); });
  for (const CLI::App* sub : subs) node.subcommands.push_back(sub->get_name());
  nodes.push_back(node);
  for (const CLI::App* sub : subs)
    walk(*sub, path.empty() ? sub->get_name() : path + " " + sub->get_name(), nodes);
}

std::string join(const std::vector<std::string>& words) {
  std::string out;
  for (const auto& w : words) out += (out.empty() ? "" : " ") + w;
  return out;
}

// The fixed part: find the command path in COMP_WORDS (skipping options and their values), then
// complete an option's value, an option, a subcommand or a positional file.
constexpr const char* k_driver = R"sh(
# Completes KIND ($1: "words ...", "file", "dir") for the word $2. zsh's compgen (bashcompinit)
# lists files for the whole word on the command line, not for $2 (the part after "--opt="), and
# has no compopt: there the files are a glob of $2.
_@F@_complete_value() {
  case "$1" in
    words\ *) COMPREPLY+=($(compgen -W "${1#words }" -- "$2")) ;;
    file) if [[ -n ${ZSH_VERSION-} ]]; then COMPREPLY+=($(compgen -G "$2*"))
          else compopt -o filenames 2>/dev/null; COMPREPLY+=($(compgen -f -- "$2")); fi ;;
    dir) if [[ -n ${ZSH_VERSION-} ]]; then COMPREPLY+=($(compgen -G "$2*/"))
         else compopt -o filenames 2>/dev/null; COMPREPLY+=($(compgen -d -- "$2")); fi ;;
  esac
}

_@F@() {
  local cur="${COMP_WORDS[COMP_CWORD]}" path='' i w opt='' kind head=''
  COMPREPLY=()
  for ((i = 1; i < COMP_CWORD; i++)); do
    w="${COMP_WORDS[i]}"
    if [[ $w == -* ]]; then
      [[ $w != *=* && -n $(_@F@_value "$path" "$w") ]] && ((i++))
      continue
    fi
    [[ " $(_@F@_subcommands "$path") " == *" $w "* ]] && path="${path:+$path }$w"
  done
  # An option's value: after "--opt", or after "--opt=" (bash splits "=" into a word of its own;
  # zsh, and bash without "=" in COMP_WORDBREAKS, keep "--opt=value" one word: the candidates
  # then carry the "--opt=" head).
  if [[ $cur == = ]]; then
    opt="${COMP_WORDS[COMP_CWORD-1]}"; cur=''
  elif ((COMP_CWORD > 1)) && [[ ${COMP_WORDS[COMP_CWORD-1]} == = ]]; then
    opt="${COMP_WORDS[COMP_CWORD-2]}"
  elif [[ $cur == --*=* ]]; then
    opt="${cur%%=*}"; head="$opt="; cur="${cur#*=}"
  elif ((COMP_CWORD > 1)) && [[ ${COMP_WORDS[COMP_CWORD-1]} == -* ]]; then
    opt="${COMP_WORDS[COMP_CWORD-1]}"
  fi
  if [[ -n $opt ]]; then
    kind=$(_@F@_value "$path" "$opt")
    if [[ -n $kind ]]; then
      _@F@_complete_value "$kind" "$cur"
      [[ -n $head ]] && COMPREPLY=("${COMPREPLY[@]/#/$head}")
      return 0
    fi
  fi
  if [[ $cur == -* ]]; then
    COMPREPLY=($(compgen -W "$(_@F@_options "$path")" -- "$cur"))
    return 0
  fi
  COMPREPLY=($(compgen -W "$(_@F@_subcommands "$path")" -- "$cur"))
  kind=$(_@F@_positional "$path")
  [[ -n $kind ]] && _@F@_complete_value "$kind" "$cur"
  return 0
}
complete -F _@F@ @P@
)sh";

std::string replace_all(std::string s, const std::string& from, const std::string& to) {
  for (auto at = s.find(from); at != std::string::npos; at = s.find(from, at + to.size()))
    s.replace(at, from.size(), to);
  return s;
}

std::string bash_script(const CLI::App& app, const std::string& program) {
  std::vector<Node> nodes;
  walk(app, "", nodes);
  const std::string fn = "_" + replace_all(program, "-", "_");
  std::ostringstream s;
  s << "# bash completion for " << program << ", generated by `" << program
    << " completion bash` from its own command-line definition: do not edit.\n\n";
  s << "# The subcommands of the command path $1 (\"\" for " << program << " itself).\n";
  s << fn << "_subcommands() {\n  case \"$1\" in\n";
  for (const auto& n : nodes)
    if (!n.subcommands.empty())
      s << "    " << quote(n.path) << ") echo " << quote(join(n.subcommands)) << " ;;\n";
  s << "  esac\n}\n\n# The options valid after the command path $1.\n";
  s << fn << "_options() {\n  case \"$1\" in\n";
  for (const auto& n : nodes)
    s << "    " << quote(n.path) << ") echo " << quote(join(n.options)) << " ;;\n";
  s << "  esac\n}\n\n# What option $2 of command path $1 takes: \"words ...\", \"file\", \"dir\" "
       "or \"value\"; nothing for a flag.\n";
  s << fn << "_value() {\n  case \"$1|$2\" in\n";
  for (const auto& n : nodes)
    for (const auto& [name, kind] : n.values)
      s << "    " << quote(n.path + "|" + name) << ") echo " << quote(kind) << " ;;\n";
  s << "  esac\n}\n\n# What the positionals of command path $1 take (\"file\", ...), if known.\n";
  s << fn << "_positional() {\n  case \"$1\" in\n";
  for (const auto& n : nodes)
    if (!n.positional.empty() && n.positional != "value")
      s << "    " << quote(n.path) << ") echo " << quote(n.positional) << " ;;\n";
  s << "  esac\n}\n";
  s << replace_all(replace_all(k_driver, "@F@", fn.substr(1)), "@P@", program);
  return s.str();
}

}  // namespace

std::string completion_script(const CLI::App& app, const std::string& program, Shell shell) {
  std::string script = bash_script(app, program);
  if (shell == Shell::zsh) {
    const std::string fn = "_" + replace_all(program, "-", "_");
    script = "#compdef " + program +
             "\n# zsh runs the bash completion through bashcompinit. Load it with `source <(" +
             program + " completion zsh)` after compinit, or save it as " + fn +
             " in a directory of $fpath.\n"
             "autoload -U +X bashcompinit && bashcompinit\n" +
             script + "# Autoloaded from $fpath, this file is the body of " + fn +
             "'s first call: answer that <TAB> too\n# (the calls after it go to the functions "
             "above).\nif [[ ${funcstack[1]-} == " +
             fn +
             " && ${zsh_eval_context[-1]-} == (loadautofunc|shfunc) ]]; then\n"
             "  _bash_complete -F " +
             fn + "\nfi\n";
  }
  return script;
}

}  // namespace ktune::cli
