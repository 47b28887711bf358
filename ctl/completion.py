"""Shell completion scripts for clowderctl (bash, zsh, fish), generated from its parser.

One walk of the argparse tree (``tree``) gives every command path with its options,
whether each takes a value, their choices and help; each shell gets a small
data-driven script: tables of those facts, and one function that finds the command
path of the words typed so far (skipping options and their values) and offers what
that path has.  No dependency: `clowderctl completion SHELL` prints the same script the
packages install (packaging/gendocs.py), from the parser of the code that runs.
Why not shtab: docs/design.md, "man pages and completions".

Only the parser's own facts are completed (commands, options, choices, files for a
value or argument without choices); session and agent names would need a daemon.
"""

from __future__ import annotations

import argparse

PROG = "clowderctl"
SHELLS = ("bash", "zsh", "fish")


class Option:
    """One optional argument: its strings, whether it takes a value, its choices."""

    def __init__(self, action: argparse.Action):
        self.action = action
        self.strings = list(action.option_strings)
        self.takes_value = action.nargs != 0
        self.choices = [str(c) for c in action.choices] if action.choices else []
        self.help = action.help or ""


class Node:
    """One parser of the tree: the root (path ()) or a (sub)command."""

    def __init__(self, path: tuple[str, ...], parser: argparse.ArgumentParser, help=""):
        self.path = path
        self.parser = parser
        self.help = help
        self.options: list[Option] = []
        self.positionals: list[argparse.Action] = []
        self.commands: list[tuple[list[str], str, Node]] = []  # (names, help, node)

    @property
    def name(self) -> str:
        return " ".join(self.path)

    def walk(self):
        """This node and every node under it, depth first, in the parser's order."""
        yield self
        for _names, _help, child in self.commands:
            yield from child.walk()


def tree(parser: argparse.ArgumentParser, path: tuple[str, ...] = (), help="") -> Node:
    """The whole command tree of ``parser``, lazy subcommands built (load_all)."""
    node = Node(path, parser, help)
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            if hasattr(action, "load_all"):
                action.load_all()
            for choice in action._choices_actions:
                name = choice.dest
                sub = action._name_parser_map[name]
                names = [name] + [other for other, p in action._name_parser_map.items()
                                  if p is sub and other != name]
                node.commands.append((names, choice.help or "",
                                      tree(sub, path + (name,), choice.help or "")))
        elif action.help == argparse.SUPPRESS:
            continue
        elif action.option_strings:
            node.options.append(Option(action))
        else:
            node.positionals.append(action)
    return node


def script(shell: str, parser: argparse.ArgumentParser) -> str:
    """The completion script for ``shell`` (one of SHELLS)."""
    root = tree(parser)
    try:
        return {"bash": _bash, "zsh": _zsh, "fish": _fish}[shell](root)
    except KeyError:
        raise ValueError(f"no completion for {shell!r}: {', '.join(SHELLS)}") from None


def _q(text: str) -> str:
    """Single-quoted for bash and zsh."""
    return "'" + text.replace("'", "'\\''") + "'"


def _fq(text: str) -> str:
    """Single-quoted for fish (which escapes \\ and ' inside)."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _one_line(text: str) -> str:
    return " ".join(text.replace("%%", "%").split())


def _tables(root: Node, fn: str, quote, item) -> list[str]:
    """Shell functions mapping a command path to words: ``fn``_subs, _opts, _argopts,
    _choices (path and option) and _args (a leaf's positional choices)."""
    def case(name: str, rows: list[tuple[str, list[str]]]) -> list[str]:
        lines = [f"{fn}_{name}() {{", '    case "$1" in']
        lines += [f"    {quote(key)}) {item(words)} ;;" for key, words in rows if words]
        return lines + ["    esac", "}"]
    nodes = list(root.walk())
    subs = [(n.name, [w for names, _, _ in n.commands for w in names]) for n in nodes]
    opts = [(n.name, [s for o in n.options for s in o.strings]) for n in nodes]
    argopts = [(n.name, [s for o in n.options if o.takes_value for s in o.strings])
               for n in nodes]
    choices = [(f"{n.name}|{s}", o.choices) for n in nodes for o in n.options
               if o.choices for s in o.strings]
    args = [(n.name, [str(c) for p in n.positionals for c in (p.choices or ())])
            for n in nodes if not n.commands]
    return (case("subs", subs) + case("opts", opts) + case("argopts", argopts)
            + case("choices", choices) + case("args", args))


def _bash(root: Node) -> str:
    fn = f"_{PROG}"
    lines = [f"# bash completion for {PROG}; generated from its parser "
             f"(`{PROG} completion bash`)."]
    lines += _tables(root, fn, _q, lambda words: "echo " + _q(" ".join(words)))
    lines += f"""\
{fn}() {{
    local cur=${{COMP_WORDS[COMP_CWORD]}} path= skip= opt= w i
    for ((i = 1; i < COMP_CWORD; i++)); do
        w=${{COMP_WORDS[i]}}
        if [[ -n $skip ]]; then skip=; continue; fi
        case $w in
        --*=* | =) ;;
        -*) [[ " $({fn}_argopts "$path") " == *" $w "* ]] && skip=1 opt=$w ;;
        *) [[ " $({fn}_subs "$path") " == *" $w "* ]] && path=${{path:+$path }}$w ;;
        esac
    done
    local words
    if [[ -n $skip ]]; then
        words=$({fn}_choices "$path|$opt")
    elif [[ $cur == -* ]]; then
        words=$({fn}_opts "$path")
    else
        words=$({fn}_subs "$path")
        [[ -n $words ]] || words=$({fn}_args "$path")
    fi
    if [[ -n $words ]]; then
        COMPREPLY=($(compgen -W "$words" -- "$cur"))
    else
        compopt -o filenames 2>/dev/null
        COMPREPLY=($(compgen -f -- "$cur"))
    fi
}}
complete -F {fn} {PROG}
""".splitlines()
    return "\n".join(lines) + "\n"


def _zsh(root: Node) -> str:
    fn = f"_{PROG}"
    described = {}  # path -> "name:help" entries of its commands and options
    for n in root.walk():
        described[("subs", n.name)] = [
            f"{w}:{_one_line(h)}" for names, h, _ in n.commands for w in names]
        described[("opts", n.name)] = [
            f"{s}:{_one_line(o.help)}" for o in n.options for s in o.strings]

    def table(name: str) -> list[str]:
        lines = [f"{fn}_{name}() {{", '    case "$1" in']
        lines += [f"    {_q(path)}) reply=({' '.join(_q(e) for e in entries)}) ;;"
                  for (kind, path), entries in described.items() if kind == name and entries]
        return lines + ["    *) reply=() ;;", "    esac", "}"]
    lines = [f"#compdef {PROG}",
             f"# zsh completion for {PROG}; generated from its parser "
             f"(`{PROG} completion zsh`)."]
    lines += _tables(root, f"{fn}_w", _q, lambda words: "echo " + _q(" ".join(words)))
    lines += table("subs") + table("opts")
    lines += f"""\
{fn}() {{
    local cur=${{words[CURRENT]}} cmdpath= skip= opt= w i
    local -a reply choices
    for ((i = 2; i < CURRENT; i++)); do
        w=${{words[i]}}
        if [[ -n $skip ]]; then skip=; continue; fi
        case $w in
        --*=*) ;;
        -*) [[ " $({fn}_w_argopts "$cmdpath") " == *" $w "* ]] && skip=1 opt=$w ;;
        *) [[ " $({fn}_w_subs "$cmdpath") " == *" $w "* ]] && cmdpath=${{cmdpath:+$cmdpath }}$w ;;
        esac
    done
    if [[ -n $skip ]]; then
        choices=(${{=$({fn}_w_choices "$cmdpath|$opt")}})
        if (( $#choices )); then compadd -a choices; else _files; fi
    elif [[ $cur == -* ]]; then
        {fn}_opts "$cmdpath"
        _describe -t options option reply
    else
        {fn}_subs "$cmdpath"
        if (( $#reply )); then
            _describe -t commands command reply
        else
            choices=(${{=$({fn}_w_args "$cmdpath")}})
            if (( $#choices )); then compadd -a choices; else _files; fi
        fi
    fi
}}
# Autoloaded from $fpath (the packages' _clowderctl): complete; sourced (eval "$(clowderctl
# completion zsh)" after compinit): register.
if [[ $funcstack[1] == {fn} ]]; then
    {fn} "$@"
else
    compdef {fn} {PROG}
fi
""".splitlines()
    return "\n".join(lines) + "\n"


def _fish(root: Node) -> str:
    fn = f"__{PROG}"
    lines = [f"# fish completion for {PROG}; generated from its parser "
             f"(`{PROG} completion fish`)."]
    for name, rows in (
            ("subs", [(n.name, [w for names, _, _ in n.commands for w in names])
                      for n in root.walk()]),
            ("argopts", [(n.name, [s for o in n.options if o.takes_value
                                   for s in o.strings]) for n in root.walk()])):
        lines += [f"function {fn}_{name}", "    switch \"$argv[1]\""]
        for key, words in rows:
            if words:
                lines += [f"        case {_fq(key)}",
                          f"            printf '%s\\n' {' '.join(_fq(w) for w in words)}"]
        lines += ["    end", "end"]
    lines += f"""\
function {fn}_path
    set -l tokens (commandline -opc)
    set -l path ''
    set -l skip 0
    for t in $tokens[2..-1]
        if test $skip = 1
            set skip 0
            continue
        end
        switch $t
            case '--*=*'
            case '-*'
                contains -- $t ({fn}_argopts "$path"); and set skip 1
            case '*'
                if contains -- $t ({fn}_subs "$path")
                    set path (string trim -- "$path $t")
                end
        end
    end
    echo $path
end
function {fn}_at
    test "$({fn}_path)" = "$argv[1]"
end
complete -c {PROG} -e
""".splitlines()
    for n in root.walk():
        at = f"-n {_fq(f'{fn}_at {_fq(n.name)}')}"
        for names, h, _ in n.commands:
            for w in names:
                lines.append(f"complete -c {PROG} -f {at} -a {_fq(w)} -d {_fq(_one_line(h))}")
        for o in n.options:
            flags = []
            for s in o.strings:
                if s.startswith("--"):
                    flags.append(f"-l {_fq(s[2:])}")
                elif len(s) == 2:
                    flags.append(f"-s {_fq(s[1:])}")
                else:
                    flags.append(f"-o {_fq(s[1:])}")
            value = ""
            if o.choices:
                value = f" -x -a {_fq(' '.join(o.choices))}"
            elif o.takes_value:
                value = " -r"
            lines.append(f"complete -c {PROG} {at} {' '.join(flags)}{value} "
                         f"-d {_fq(_one_line(o.help))}")
        if not n.commands:
            choices = [str(c) for p in n.positionals for c in (p.choices or ())]
            if choices:
                lines.append(f"complete -c {PROG} -f {at} -a {_fq(' '.join(choices))}")
    return "\n".join(lines) + "\n"
