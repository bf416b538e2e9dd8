#!/usr/bin/env python3
"""The support matrix's op table, generated from the kernel-family registry.

    python tools/support_matrix.py            # print the generated section
    python tools/support_matrix.py --write    # rewrite it in docs/support_matrix.md
    python tools/support_matrix.py --check    # exit 1 if docs/support_matrix.md is stale (a test runs this)

Exit: 0 ok, 1 stale, 3 usage error. Stdlib only (the registry is loaded by path, without torch).
"""

from __future__ import annotations

import os
import sys

import host_decls

from vendorkit.argparsing import UsageParser
from vendorkit.errors import UsageError

DOC = os.path.join(host_decls.ROOT, "docs", "support_matrix.md")
BEGIN, END = "<!-- BEGIN GENERATED (tools/support_matrix.py) -->", "<!-- END GENERATED -->"


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def render() -> str:
    reg = host_decls.registry()
    rows = ["| entry point | operands | output | notes |", "|---|---|---|---|"]
    for fam in reg.families:
        aliases: dict[str, list[str]] = {}
        for decl in fam.names:
            if decl.alias_of:
                aliases.setdefault(decl.alias_of, []).append(decl.name)
        for op in fam.ops:
            name = f"`{op.signature or op.name}`"
            if op.name in aliases:
                name += " (= " + ", ".join(f"`{a}`" for a in aliases[op.name]) + ")"
            rows.append(f"| {name} | {_cell(op.operands)} | {_cell(op.output)} | {_cell(op.notes)} |")
    fams = ["", "| kernel family | kind | header | instantiations | PDL |", "|---|---|---|---|---|"]
    for fam in reg.families:
        fams.append(
            f"| `{fam.name}` | {'service' if fam.service else 'family'} | `device_layer/{fam.header}` | "
            f"{len(fam.specs())} | {'waits on griddepcontrol' if fam.pdl else 'no'} |"
        )
    return "\n".join([BEGIN, *rows, *fams, END])


def splice(doc: str, section: str) -> str:
    if BEGIN not in doc or END not in doc:
        raise UsageError(f"{DOC} has no generated section ({BEGIN} ... {END})")
    head, rest = doc.split(BEGIN, 1)
    return head + section + rest.split(END, 1)[1]


def main(argv: list[str] | None = None) -> int:
    ap = UsageParser(prog="support_matrix.py", description=__doc__.splitlines()[0])
    g = ap.add_mutually_exclusive_group()
    g.add_argument("--write", action="store_true")
    g.add_argument("--check", action="store_true")
    try:
        a = ap.parse_args(argv)
        section = render()
        if not (a.write or a.check):
            print(section)
            return 0
        with open(DOC, encoding="utf-8") as fh:
            doc = fh.read()
        new = splice(doc, section)
    except UsageError as e:
        print(f"support_matrix: error: {e}", file=sys.stderr)
        return 3
    if a.check:
        if new != doc:
            print(f"{DOC} is stale: run python tools/support_matrix.py --write", file=sys.stderr)
            return 1
        return 0
    with open(DOC, "w", encoding="utf-8") as fh:
        fh.write(new)
    return 0


if __name__ == "__main__":
    sys.exit(main())
