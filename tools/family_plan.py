#!/usr/bin/env python3
"""What qualification runs, read from the family declarations (no list of families anywhere else).

    python tools/family_plan.py sanitizers    # compute-sanitizer drivers: tests/sanitize_<x>.py, one name a line
    python tools/family_plan.py benchmarks    # GPU benchmarks: benchmarks/bench_<x>.py
    python tools/family_plan.py families      # user families, then service kernels (marked)

Used by .github/workflows/ci.yml's GPU job and tools/qualify_h200.sh. Stdlib only (the registry is read by path,
without torch). Exit 3 on bad arguments.
"""

from __future__ import annotations

import sys

import host_decls

from vendorkit.argparsing import UsageParser
from vendorkit.errors import UsageError


def plan(what: str) -> list[str]:
    reg = host_decls.registry()
    if what == "families":
        return [
            f.name + (" (service)" if f.service else "")
            for f in (*reg.user_families, *(f for f in reg.families if f.service))
        ]
    attr = {"sanitizers": "sanitizers", "benchmarks": "benchmarks"}[what]
    return list(dict.fromkeys(x for f in reg.families for x in getattr(f, attr)))


def main(argv: list[str] | None = None) -> int:
    ap = UsageParser(prog="family_plan.py", description=__doc__.splitlines()[0])
    ap.add_argument("what", choices=("sanitizers", "benchmarks", "families"))
    try:
        a = ap.parse_args(argv)
    except UsageError as e:
        print(f"family_plan: error: {e}", file=sys.stderr)
        return e.exit_code
    print("\n".join(plan(a.what)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
