#!/usr/bin/python3
"""Generate the man pages and shell completions from the code: the build step of the
packages (debian/rules, the spec; `make gendocs`), never committed.

    python3 packaging/gendocs.py OUT      (from the tree's root)

writes
    OUT/man/clowderctl.1  OUT/man/ptyhostd.8  OUT/man/clowder-control.8  OUT/man/clowder.yaml.5
    OUT/man/clowder-web.8
    OUT/completions/bash/clowderctl  OUT/completions/zsh/_clowderctl
    OUT/completions/fish/clowderctl.fish

Each program's page comes from its argparse parser (synopsis, description, every option
and subcommand with its help, the epilog's "heading:" blocks as sections) plus the prose
in packaging/man/PROGRAM.txt; clowder.yaml(5) from the schema's documentation
(controld/schema.py, which the validator's messages use too) plus
packaging/man/clowder.yaml.txt.  The completions are `clowderctl completion SHELL`'s
(ctl/completion.py).  Why not argparse-manpage or shtab: docs/design.md, "man pages and
completions".

The prose files' markup, the least that reads as text:
    # HEADING            a section (NAME is the whatis line: "name - what it is")
    a paragraph          lines up to a blank line, filled; `code` is bold, {name} italic
    - item               a bulleted paragraph
    term                 a tagged paragraph (FILES, ENVIRONMENT): an unindented line
        its text         followed by lines indented four spaces
      preformatted       a paragraph whose first line is indented (two spaces)
"""

from __future__ import annotations

import argparse
import datetime
import os
import re
import sys
import textwrap

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from clowder_common import __version__  # noqa: E402
from ctl import completion  # noqa: E402

PROSE = os.path.join(ROOT, "packaging", "man")
# Sections that close a page, in this order (man-pages(7)); others keep their place.
LAST = ("EXIT STATUS", "ENVIRONMENT", "FILES", "EXAMPLES", "SEE ALSO")
SECTION_TITLES = {1: "User Commands", 5: "File Formats", 8: "System Administration"}


def pages():
    """(name, section, parser or None) of every page, each parser imported only here."""
    from controld.__main__ import parser as control_parser
    from ctl.cli import build_parser
    from ptyhostd.__main__ import parser as host_parser
    from webd.__main__ import parser as web_parser
    return (("clowderctl", 1, build_parser()), ("ptyhostd", 8, host_parser()),
            ("clowder-control", 8, control_parser()), ("clowder-web", 8, web_parser()),
            ("clowder.yaml", 5, None))


# -- roff ---------------------------------------------------------------------------

def esc(text: str) -> str:
    """Plain text as roff: backslashes, minus signs, non-ASCII characters escaped."""
    text = text.replace("\\", "\\e").replace("-", "\\-")
    return "".join(c if ord(c) < 128 else f"\\[u{ord(c):04X}]" for c in text)


def line(text: str) -> str:
    """One input line: a leading . or ' would be read as a request."""
    return "\\&" + text if text[:1] in (".", "'") else text


def marked(text: str) -> str:
    """Prose with `code` bold and {name} italic."""
    text = esc(text)
    text = re.sub(r"`([^`]+)`", r"\\fB\1\\fR", text)
    return re.sub(r"\{([^{}\s][^{}]*)\}", r"\\fI\1\\fR", text)


def preformatted(text: str) -> list[str]:
    return [".RS 4", ".nf"] + [line(esc(t)) for t in textwrap.dedent(text).splitlines()] \
        + [".fi", ".RE"]


def usage(words: str) -> str:
    """An argparse usage (after the program's name): options bold, metavars italic."""
    out = []
    tokens = re.findall(r"\s+|[^\s\[\]|()]+|[\[\]|()]", words)
    for i, token in enumerate(tokens):
        if token.isspace() and 0 < i < len(tokens) - 1 and tokens[i - 1][:1] == "-" \
                and tokens[i + 1][:1] not in "-[]|()":
            out.append("\\ ")  # an option and its value on one line
        elif token.startswith("-"):
            out.append(f"\\fB{esc(token)}\\fR")
        elif token.strip() and token not in "[]|()" and token != "...":
            out.append(f"\\fI{esc(token)}\\fR")
        else:
            out.append(esc(token))
    return "".join(out).strip()


def synopsis(parser: argparse.ArgumentParser, prog: str) -> list[str]:
    text = " ".join(parser.format_usage().split())
    text = text.removeprefix("usage:").strip().removeprefix(prog).strip()
    return [f".B {esc(prog)}", usage(text)] if text else [f".B {esc(prog)}"]


def invocation(action: argparse.Action, prog: str) -> str:
    formatter = argparse.HelpFormatter(prog)
    return usage(formatter._format_action_invocation(action))


def help_text(action: argparse.Action, prog: str) -> str:
    if not action.help:
        return ""
    return argparse.HelpFormatter(prog)._expand_help(action)


def epilog_body(heading: str, text: str) -> list[str]:
    """An epilog block as roff, paragraph by paragraph: a table (``CODE  text`` rows,
    their continuations indented) as tagged paragraphs, wrapped prose filled, anything
    else (examples) as it is."""
    out: list[str] = []
    for para in re.split(r"\n\s*\n", textwrap.dedent(text).strip("\n")):
        rows = para.splitlines()
        if re.match(r"\S+ {2,}\S", rows[0]) and all(
                re.match(r"\S+ {2,}\S|\s+\S", row) for row in rows):
            for row in rows:
                if row[:1].isspace():
                    out[-1] += " " + esc(row.strip())
                else:
                    term, body = re.match(r"(\S+) {2,}(.*)", row).groups()
                    out += [".TP", f"\\fB{esc(term)}\\fR", line(esc(body))]
        elif "example" not in heading.lower() and not re.search(r" {3,}|^\s", para, re.M) \
                and all(len(row) >= 50 for row in rows[:-1]):
            out += [".PP", line(esc(" ".join(row.strip() for row in rows)))]
        else:
            out += preformatted(para)
    return out


def epilog_sections(epilog: str | None) -> list[tuple[str, str]]:
    """An epilog's "heading:" blocks as (HEADING, preformatted body); text before the
    first heading is ("", text)."""
    sections: list[tuple[str, str]] = []
    for chunk in re.split(r"\n(?=[a-z][a-z ]*:\n)", (epilog or "").strip("\n")):
        match = re.match(r"([a-z][a-z ]*):\n(.*)", chunk, re.S)
        if match:
            sections.append((match[1].upper(), match[2]))
        elif chunk.strip():
            sections.append(("", chunk))
    return sections


def prose(name: str) -> list[tuple[str, list[str]]]:
    """packaging/man/NAME.txt as (HEADING, roff lines) in file order."""
    path = os.path.join(PROSE, f"{name}.txt")
    with open(path, encoding="utf-8") as f:
        text = f.read()
    sections: list[tuple[str, list[str]]] = []
    for block in re.split(r"^# ", text, flags=re.M)[1:]:
        heading, _, body = block.partition("\n")
        out: list[str] = []
        for para in re.split(r"\n\s*\n", body.strip("\n")):
            if not para.strip():
                continue
            rows = para.splitlines()
            if rows[0].startswith("  "):
                out += preformatted(para)
            elif rows[0].startswith("- "):
                out += [".IP \\(bu 2", line(marked(" ".join(r.strip() for r in rows)[2:]))]
            elif len(rows) > 1 and rows[1].startswith("    "):
                out += _tagged(rows)
            else:
                out += [".PP", line(marked(" ".join(r.strip() for r in rows)))]
        sections.append((heading.strip(), out))
    return sections


def _tagged(rows: list[str]) -> list[str]:
    out, body = [], []
    for row in rows + [""]:
        if row.startswith("    "):
            body.append(row.strip())
            continue
        if out or body:
            out.append(line(marked(" ".join(body))))
            body = []
        if row:
            out += [".TP", line(marked(row))]
    return out


def page(name: str, section: int, body: list[tuple[str, list[str]]]) -> str:
    """A whole page: the header, then the sections in order (LAST ones last)."""
    epoch = os.environ.get("SOURCE_DATE_EPOCH")  # reproducible builds: the changelog's
    date = datetime.datetime.fromtimestamp(int(epoch), datetime.timezone.utc) \
        .strftime("%Y-%m-%d") if epoch else ""
    merged: dict[str, list[str]] = {}
    for heading, lines in body:
        merged.setdefault(heading, []).extend(lines)
    order = [h for h in merged if h not in LAST] + [h for h in LAST if h in merged]
    out = [f'.TH "{esc(name.upper())}" {section} "{date}" "clowder {esc(__version__)}" '
           f'"{SECTION_TITLES[section]}"', ".ad l", ".nh"]
    for heading in order:
        out += [f'.SH "{heading}"'] + merged[heading]
    return "\n".join(out) + "\n"


# -- program pages ------------------------------------------------------------------

def program_page(name: str, section: int, parser: argparse.ArgumentParser) -> str:
    root = completion.tree(parser)
    extra = prose(name)
    body = [(h, lines) for h, lines in extra if h == "NAME"]
    body.append(("SYNOPSIS", synopsis(parser, name)))
    whatis = " ".join(" ".join(lines) for h, lines in extra if h == "NAME").lower()
    description = [".PP", line(esc(parser.description))] \
        if parser.description and parser.description.lower().rstrip(".") not in whatis \
        else []
    body.append(("DESCRIPTION", description))
    body += [(h, lines) for h, lines in extra if h == "DESCRIPTION"]
    body.append(("OPTIONS", _arguments(root, name)))
    if root.commands:
        commands = []
        for node in list(root.walk())[1:]:
            commands += _command(node, name)
        body.append(("COMMANDS", commands))
    for heading, text in epilog_sections(parser.epilog):
        body.append((heading or "NOTES", epilog_body(heading, text)))
    body += [(h, lines) for h, lines in extra if h not in ("NAME", "DESCRIPTION")]
    return page(name, section, body)


def _arguments(node: completion.Node, prog: str) -> list[str]:
    out = []
    for action in node.positionals:
        if not isinstance(action, argparse._SubParsersAction):
            out += [".TP", invocation(action, prog), line(esc(help_text(action, prog)))]
    for option in node.options:
        out += [".TP", invocation(option.action, prog),
                line(esc(help_text(option.action, prog)))]
    return out


def _command(node: completion.Node, prog: str) -> list[str]:
    """One subcommand: its heading, synopsis, help, arguments and epilog."""
    full = f"{prog} {node.name}"
    out = [f'.SS "{esc(node.name)}"', ".PP"] + synopsis(node.parser, full)
    if node.help:
        out += [".PP", line(esc(node.help))]
    if node.parser.description and node.parser.description != node.help:
        out += [".PP", line(esc(node.parser.description))]
    out += _arguments(node, full)
    for heading, text in epilog_sections(node.parser.epilog):
        out += [".PP", esc(heading.capitalize() + ":")] if heading else []
        out += epilog_body(heading, text)
    return out


# -- clowder.yaml(5) ----------------------------------------------------------------

def config_page() -> str:
    from controld import schema
    extra = prose("clowder.yaml")
    body = [(h, lines) for h, lines in extra if h == "NAME"]
    body.append(("SYNOPSIS", [".I /etc/clowder/clowder.yaml", ".br",
                              ".I $XDG_CONFIG_HOME/clowder/clowder.yaml"]))
    body += [(h, lines) for h, lines in extra if h == "DESCRIPTION"]
    keys = []
    for where, title, entries in schema.SECTIONS:
        keys += [f'.SS "{esc(title)}"']
        for key in entries:
            tag = f"\\fB{esc(where + key.name)}\\fR"
            state = "required" if key.required else \
                f"default: {key.default}" if key.default else "optional"
            keys += [".TP", f"{tag} ({esc(key.kind)}; {esc(state)})", line(esc(key.doc))]
    body.append(("KEYS", keys))
    body += [(h, lines) for h, lines in extra if h not in ("NAME", "DESCRIPTION")]
    return page("clowder.yaml", 5, body)


# -- all ----------------------------------------------------------------------------

COMPLETIONS = (("bash", "clowderctl"), ("zsh", "_clowderctl"), ("fish", "clowderctl.fish"))


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: gendocs.py OUT", file=sys.stderr)
        return 2
    out = argv[0]
    os.makedirs(os.path.join(out, "man"), exist_ok=True)
    ctl_parser = None
    for name, section, parser in pages():
        text = config_page() if parser is None else program_page(name, section, parser)
        with open(os.path.join(out, "man", f"{name}.{section}"), "w") as f:
            f.write(text)
        if name == "clowderctl":
            ctl_parser = parser
    for shell, filename in COMPLETIONS:
        os.makedirs(os.path.join(out, "completions", shell), exist_ok=True)
        with open(os.path.join(out, "completions", shell, filename), "w") as f:
            f.write(completion.script(shell, ctl_parser))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
