#!/usr/bin/env python3
"""Drift checker, syncer and release writer for deep_gemm_sm120's device layer.

    python tools/check_vendor.py                      # self-check of this checkout
    python tools/check_vendor.py --fork ../DeepGEMM   # verify a fork against the latest release
    python tools/check_vendor.py release v0.2.0       # write vendor_manifests/v0.2.0.yaml

Needs only the standard library (PyYAML is used when installed; requests for github: and pypi: forks). See docs/vendoring.md.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from vendorkit.cli import main

if __name__ == "__main__":
    sys.exit(main(standalone=True))
