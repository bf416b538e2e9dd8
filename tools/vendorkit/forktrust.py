"""What a fork check proves about the manifest it checks against (docs/vendoring.md, "Forks pin, then verify").

A fork's stamp pins the release --sync vendored: its manifest digest, its place in the release chain (length
and head, as a checksum-database client keeps a tree head) and its signer's public key. Every later check holds
the releases this checkout shows against that pin, never against this checkout's own word alone:

- the checkout's chain must extend the pin: shorter is a `rollback`, another line at the pin a `history-rewritten`,
  and the release checked must be chained with its exact bytes at or after the pin;
- its signature must be the pinned key's, or the key that key rotated to by a statement it signed
  (vendor_manifests/rotations/), as of the release's date; else `unsigned`, `bad-signature`, `unknown-signer`
  (also a rotated-in key used before its rotation), `revoked-signer` (vendor_manifests/revoked_keys).

Without a pin (a stamp written before pins, or none) the check is trust on first use: the chain must hold the
release, and its signature is checked against this checkout's allowed_signers. An unsigned release is then a
note, drift only with --require-signed.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass

from . import chain, signing, trust
from .compare import Report
from .errors import ManifestError
from .manifest import Manifest, ManifestSet

ROTATIONS = "rotations"
FINDINGS = (
    trust.UNSIGNED,
    trust.BAD_SIGNATURE,
    trust.UNKNOWN_SIGNER,
    trust.REVOKED_SIGNER,
    trust.ROLLBACK,
    trust.HISTORY_REWRITTEN,
)


@dataclass
class Trust:
    status: str  # trust.TRUSTED, one of FINDINGS, or trust.COULD_NOT_CHECK
    detail: str
    finding: bool  # drift (exit 1): the manifest is not proven to be the release the fork pinned
    signer: dict | None = None  # {"principal", "key"} of a good signature
    signature: bytes | None = None
    blocking: bool = False  # could not check a signature the check needs (exit 2)

    def as_dict(self, pin: dict | None) -> dict:
        shown = {k: pin[k] for k in ("tag", "chain_length", "chain_head")} if pin else None
        signer = None
        if self.signer is not None:
            fp = trust.fingerprint(trust.key_blob(self.signer["key"]))
            signer = f"{self.signer['principal']} ({fp})"
        return {"status": self.status, "detail": self.detail, "finding": self.finding, "signer": signer, "pin": shown}


def revoked(mdir: str) -> frozenset:
    """Fingerprints of the keys vendor_manifests/revoked_keys lists."""
    return signing.revoked_fingerprints(os.path.join(mdir, signing.REVOKED))


def rotations(mdir: str) -> tuple[list[tuple[str, bytes, bytes, str]], list[str]]:
    """(verified rotations (principal, old, new, from), problems): every statement in vendor_manifests/rotations/
    with a good signature by its old key; each other one is a problem (the self-check's) and is not followed."""
    where = os.path.join(mdir, ROTATIONS)
    try:
        names = sorted(n for n in os.listdir(where) if n.endswith(".txt"))
    except (FileNotFoundError, NotADirectoryError):
        return [], []
    good, problems = [], []
    for name in names[:1000]:
        rel = f"vendor_manifests/{ROTATIONS}/{name}"
        data = signing.read_bounded(os.path.join(where, name), trust.ROTATION_MAX_BYTES) or b""
        try:
            principal, old, new, start = trust.parse_rotation(data)
        except trust.TrustError as e:
            problems.append(f"{rel}: {e}")
            continue
        sig = signing.read_bounded(os.path.join(where, name + ".sig"), trust.SIG_MAX_BYTES)
        if sig is None:
            problems.append(f"{rel}: no signature by the old key ({name}.sig)")
            continue
        status, detail = trust.verify_with_key(data, sig, old, trust.ROTATION_NAMESPACE)
        if status != trust.TRUSTED:
            problems.append(f"{rel}.sig: {status}: {detail}")
            continue
        good.append((principal, old, new, start))
    return good, problems


def _links(mdir: str) -> list[tuple[str, str, str, str]] | None:
    """The checkout's chain as trust.check_pin takes it; None when it has none; ManifestError when it is broken."""
    links = chain.read(mdir)
    return [(link.tag, link.manifest_sha256, link.prev, link.position) for link in links] if links else None


def _dates_from_pin(ms: ManifestSet, links: list, pin: dict, tag: Manifest) -> tuple[str, str] | None:
    """Release dates never decrease along the chain from the pinned release to `tag` (a backdated release could be
    signed by a key rotated out since): each release there must be here, chained with its bytes, and dated no
    earlier than the one before it."""
    tags = [link[0] for link in links]
    start, end = pin["chain_length"] - 1, tags.index(tag.tag)
    before = None
    for i in range(start, end + 1):
        m = ms.by_tag.get(tags[i])
        if m is None or m.chain is None or m.chain[1] != links[i][3]:
            return trust.HISTORY_REWRITTEN, f"{tags[i]}, chained after the pinned {pin['tag']}, has no manifest here"
        if before is not None and m.created < before.created:
            return trust.ROLLBACK, (
                f"{m.tag} is dated {m.created}, before {before.tag} ({before.created}) which it follows in the "
                f"chain: a backdated release (a key rotated out since could sign it)"
            )
        before = m
    return None


def evaluate(ms: ManifestSet, tag: Manifest, pin: dict | None, require_signed: bool = False) -> Trust | None:
    """The trust of manifest `tag` for a fork whose stamp pinned `pin` (None: not pinned); None for an upstream
    lineage (not ours to sign) or a manifest set not read from a directory."""
    mdir = getattr(ms, "directory", None)
    if ms.lineage is not None:
        return Trust(
            trust.UNSIGNED, f"{ms.name}'s releases are an upstream lineage's (not signed by us)", require_signed
        )
    if mdir is None or tag.text is None:
        return None
    data = tag.text.encode("utf-8")
    sha = hashlib.sha256(data).hexdigest()
    try:
        links = _links(mdir)
    except ManifestError as e:
        return Trust(trust.HISTORY_REWRITTEN, f"this checkout's release chain is broken ({e})", True)
    if pin is not None:
        found = trust.check_pin(pin, links, tag.tag, sha)
        if found is not None:
            return Trust(found[0], found[1], True)
        found = _dates_from_pin(ms, links or [], pin, tag)
        if found is not None:
            return Trust(found[0], found[1], True)
    elif links is not None:
        found = trust.check_pin({"tag": links[0][0], "chain_length": 1, "chain_head": links[0][3]}, links, tag.tag, sha)
        if found is not None:
            return Trust(found[0], found[1], True)
    sig_path = signing.signature_path(mdir, tag.tag)
    sig = signing.read_bounded(sig_path, trust.SIG_MAX_BYTES)
    signer = (pin or {}).get("signer")
    if signer is not None:
        if sig is None:
            return Trust(trust.UNSIGNED, f"{tag.tag} has no signature, but the fork pinned {signer['principal']}", True)
        pinned = trust.key_blob(signer["key"])
        good, _ = rotations(mdir)
        key, followed = trust.walk(pinned, [(o, n, s, p) for p, o, n, s in good], tag.created)
        status, detail = trust.verify_with_key(data, sig, key, trust.RELEASE_NAMESPACE, revoked(mdir))
        if status == trust.UNKNOWN_SIGNER:
            walked = [trust.fingerprint(pinned)] + [trust.fingerprint(r[1]) for r in followed]
            via = f" (rotated {' -> '.join(walked)})" if followed else ""
            detail += f": a release of {tag.created} must be signed by the pinned key{via}"
        if status == trust.TRUSTED:
            principal = followed[-1][3] if followed else signer["principal"]  # named by a statement it followed
            return Trust(status, detail, False, {"principal": principal, "key": trust.key_line(key)}, sig)
        return Trust(status, detail, status in FINDINGS, blocking=status == trust.COULD_NOT_CHECK)
    if sig is None:
        why = f"{tag.tag} is not signed" + ("" if pin is None else " (the fork pinned it unsigned)")
        return Trust(trust.UNSIGNED, why, require_signed)
    v = signing.verify(
        data, sig_path, os.path.join(mdir, signing.ALLOWED), os.path.join(mdir, signing.REVOKED), tag.created
    )
    if v.status == signing.OK:
        _, blob = trust.parse_signature(sig)
        first = "" if pin is None else " (first use: the fork pinned it unsigned)"
        signer = {"principal": v.principal or "?", "key": trust.key_line(blob)}
        return Trust(trust.TRUSTED, v.detail + first, False, signer, sig)
    if v.status == signing.COULD_NOT_CHECK:
        return Trust(trust.COULD_NOT_CHECK, v.detail, False, blocking=require_signed)
    return Trust(v.status, v.detail, True)


def pin_for(tag: Manifest, t: Trust | None) -> dict | None:
    """The pin --sync records for `tag`, given its trust: the release's chain place and, when its signature
    verified, its signer and signature. None for a release outside the chain or an upstream lineage's."""
    if t is None or tag.chain is None or tag.text is None or t.finding:
        return None
    good = t.status == trust.TRUSTED and t.signer is not None and t.signature is not None
    return {
        "tag": tag.tag,
        "manifest_sha256": hashlib.sha256(tag.text.encode("utf-8")).hexdigest(),
        "chain_length": tag.chain[0],
        "chain_head": tag.chain[1],
        "signer": t.signer if good else None,
        "signature": t.signature.decode("ascii") if good and t.signature is not None else None,
    }


def apply(report: Report, ms: ManifestSet, tag: Manifest, require_signed: bool = False) -> Report:
    """The report with what it proves about manifest `tag`, held against the pin of the stamp it found: what every
    fork check (check_vendor --fork, a pypi: release, the watcher) ends with."""
    pin = (report.stamp or {}).get("pin")
    return settle(report, evaluate(ms, tag, pin, require_signed), pin)


def settle(report: Report, t: Trust | None, pin: dict | None) -> Report:
    """Record the trust in the report: a finding makes a checked fork `untrusted` (exit 1); a pinned signature
    that could not be checked makes it `unknown` (exit 2)."""
    if t is None:
        return report
    report.trust = t.as_dict(pin)
    if report.verdict == "unknown":
        return report
    if t.finding:
        report.verdict = "untrusted"
    elif t.blocking:
        report.verdict = "unknown"
        report.errors.append(f"cannot check the release signature: {t.detail}")
    return report
