"""The fork's stamp (`.sm120-vendor.json` in its vendor root): what --sync wrote, which files it owns, and
pinned local patches. Parsing and validation are tools/sm120_vendor_verify.py's (the verifier forks vendor);
this adds the manifest lookups check_vendor has."""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass

from .manifest import Manifest, ManifestSet

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import sm120_vendor_verify as verifier

STAMP, VERIFIER = verifier.STAMP, verifier.VERIFIER
BACKUP_DIR = verifier.BACKUP_DIR  # --force / owned-edit backups, at the fork root; never part of the layer


@dataclass
class StampInfo:
    doc: dict
    owned: dict[str, str]  # safe paths -> sha256
    problems: list[str]  # each one is a drift finding (a stamp that cannot be trusted)

    def patch_for(self, path: str, actual_sha256: str, base_sha256: str) -> dict | None:
        p = verifier.patch_for(self.doc, path, actual_sha256, base_sha256)
        return _documented(p) if p is not None else None

    def summary(self) -> dict:
        """What reports show of the stamp: only the documented keys, so a stamp cannot add fields (a second
        `verdict`) to a report."""
        return {
            "tag": str(self.doc["tag"]),
            "owned": len(self.owned),
            "patches": [_documented(p) for p in self.doc["patches"]],
            "problems": self.problems,
            "pin": self.pin(),
        }

    def pin(self) -> dict | None:
        """The release --sync pinned (its shape checked by parse_stamp), without the signature's bytes."""
        p = self.doc.get("pin")
        if not isinstance(p, dict):
            return None
        return {k: p[k] for k in ("tag", "manifest_sha256", "chain_length", "chain_head", "signer")}


def _documented(patch: dict) -> dict:
    return {
        k: patch[k]
        for k in ("path", "base_sha256", "patched_sha256", "reason", "upstream")
        if isinstance(patch.get(k), str)
    }


def unusable_stamp(problem: str) -> StampInfo:
    """A stamp that could not be read or parsed: one finding, nothing owned, no patches."""
    return StampInfo({"tag": "?", "patches": [], "files": []}, {}, [problem])


def read_stamp(data: bytes | None, ms: ManifestSet, where: str) -> StampInfo:
    """Parse and validate a stamp against the manifest of the tag it names. An unreadable or malformed stamp is
    itself a finding (drift), never a crash."""
    if data is None:
        return unusable_stamp(f"{where}: could not be read")
    try:
        doc = verifier.parse_stamp(data.decode("utf-8", errors="replace"), where)
    except verifier.VerifyError as e:
        return unusable_stamp(str(e))
    m = ms.by_tag.get(doc["tag"])
    if doc.get("lineage") != ms.lineage:
        problems = [
            f"the stamp was written for {doc.get('lineage') or 'deep_gemm_sm120'}'s releases, checked "
            f"against {ms.name}'s"
        ] + verifier.validate(doc)
    elif m is None:
        problems = [f"the stamp names {doc['tag']}, which is not a release of {ms.name}"]
        problems += verifier.validate(doc)
    else:
        problems = verifier.validate(doc, {e.path: e.sha256 for e in m.files}, m.tree_sha256, m.tag)
    owned = {f["path"]: f["sha256"] for f in doc["files"] if verifier.safe_relative(f["path"])}
    return StampInfo(doc, owned, problems)


def stamp_text(tag: Manifest, patches: list[dict] | None = None, pin: dict | None = None) -> str:
    """The stamp --sync writes for manifest `tag` (every released file owned), keeping pinned patches; it records
    the sha256 of the verifier generated for that release and the pin (vendorkit.forktrust.pin_for)."""
    from . import verifier_gen

    return verifier.make_stamp(
        tag.tag, {e.path: e.sha256 for e in tag.files}, patches, verifier_gen.digest(tag, "sha256"), tag.lineage, pin
    )
