"""python -m deep_gemm_sm120.selftest: run the self-test, write the JSON report, print the summary."""

from __future__ import annotations

import argparse
import sys

from . import DEFAULT_JSON, EXIT_COULD_NOT_RUN, EXIT_FAILED, EXIT_OK, CouldNotRun, selftest, write
from .report import summary


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m deep_gemm_sm120.selftest",
        description="Prove the SM120 block-scaled atoms and one case per kernel family on this GPU. "
        "Exit 0 all ok, 1 something failed, 2 could not run.",
    )
    ap.add_argument("--json", default=DEFAULT_JSON, metavar="PATH", help=f"report file (default ./{DEFAULT_JSON})")
    ap.add_argument("--device", type=int, default=None, help="CUDA device index (default: the current one)")
    ap.add_argument("--atoms-only", action="store_true", help="only the atoms (what DG_SM120_SCALE_ENCODING=auto runs)")
    ap.add_argument("--families", default=None, help="comma-separated family names of the cases to run (default all)")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    families: bool | tuple[str, ...] = False if args.atoms_only else True
    if args.families and not args.atoms_only:
        families = tuple(f for f in args.families.split(",") if f)
    try:
        report = selftest(args.device, families=families, seed=args.seed)
    except CouldNotRun as e:
        print(f"deep_gemm_sm120 self-test could not run: {e}", file=sys.stderr)
        return EXIT_COULD_NOT_RUN
    path = write(report, args.json)
    print(summary(report))
    print(f"  report: {path}")
    return EXIT_OK if report["verdict"] == "pass" else EXIT_FAILED


if __name__ == "__main__":
    sys.exit(main())
