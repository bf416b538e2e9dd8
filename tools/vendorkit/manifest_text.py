"""The stdlib reader of the manifest format we write (so verifying needs no PyYAML). Its one implementation
lives in tools/sm120_vendor_verify.py, the single-file verifier forks vendor; this adapts its errors."""

from __future__ import annotations

import os
import sys

from .errors import ManifestError

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import sm120_vendor_verify as _verify


def parse(text: str, where: str) -> dict:
    try:
        return _verify.parse_manifest_text(text, where)
    except _verify.VerifyError as e:
        raise ManifestError(f"{e} (install PyYAML to read other YAML layouts)") from None
