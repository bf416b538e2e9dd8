"""Release trust shared by check_vendor and the offline verifier (which inlines this file: standard library only,
no other vendorkit module). Three things, each checkable offline:

- the release chain (vendor_manifests/chain.txt): strict parsing, and whether a chain *extends a pin* (the
  chain length and head a fork recorded when it vendored a release, as a Go checksum-database client keeps the
  last tree head it saw): a chain that ends before the pin is a rollback, one whose line at the pin differs is a
  rewritten history;
- OpenSSH SSHSIG signatures: the armored envelope parsed here (namespace and signer key, so an unknown or revoked
  signer is named without running anything), the cryptography left to `ssh-keygen -Y verify` against a
  temporary allowed-signers file holding only the expected key;
- key-rotation statements: a new release key is trusted from a date on because the old key signed a statement
  saying so; walk() follows them from a pinned key to the key that must have signed a release of a given date.
"""

from __future__ import annotations

import base64
import hashlib
import os
import re
import shutil
import subprocess
import tempfile

RELEASE_NAMESPACE = "deep_gemm_sm120-release"
ROTATION_NAMESPACE = "deep_gemm_sm120-key-rotation"
GENESIS = "0" * 64
CHAIN_MAX_BYTES = 1 << 20  # ~10,000 releases
SIG_MAX_BYTES = 16 << 10  # an ed25519 SSHSIG is ~300 bytes armored
ROTATION_MAX_BYTES = 4 << 10

TRUSTED = "trusted"
UNSIGNED = "unsigned"
BAD_SIGNATURE = "bad-signature"
UNKNOWN_SIGNER = "unknown-signer"
REVOKED_SIGNER = "revoked-signer"
ROLLBACK = "rollback"
HISTORY_REWRITTEN = "history-rewritten"
COULD_NOT_CHECK = "could-not-check"

_TAG = re.compile(r"v(0|[1-9][0-9]{0,8})\.(0|[1-9][0-9]{0,8})\.(0|[1-9][0-9]{0,8})")
_LINE = re.compile(r"(\S+) ([0-9a-f]{64}) ([0-9a-f]{64})")
_ARMOR = re.compile(
    rb"-----BEGIN SSH SIGNATURE-----\n((?:[A-Za-z0-9+/=]{1,76}\n){1,200})-----END SSH SIGNATURE-----\n?"
)
_KEY_LINE = re.compile(r"ssh-ed25519 ([A-Za-z0-9+/]{68})")
_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")
ROTATION_HEAD = "deep_gemm_sm120 release key rotation"
_ROTATION = re.compile(
    ROTATION_HEAD + r"\nprincipal: ([A-Za-z0-9_.@+-]{1,128})\nold: (ssh-ed25519 [A-Za-z0-9+/]{68})\n"
    r"new: (ssh-ed25519 [A-Za-z0-9+/]{68})\nfrom: (\d{4}-\d{2}-\d{2})\n"
)


class TrustError(ValueError):
    """Malformed trust input (a chain, a signature envelope, a key, a rotation statement)."""


def tag_key(tag: str) -> tuple[int, int, int] | None:
    m = _TAG.fullmatch(tag)
    return (int(m.group(1)), int(m.group(2)), int(m.group(3))) if m else None


# ---------------------------------------------------------------- the chain


def chain_links(data: bytes, where: str = "chain.txt") -> list[tuple[str, str, str, str]]:
    """(tag, manifest sha256, prev, position) per release, oldest first, checked as a chain: strict lines, tags
    strictly increasing, each `prev` the sha256 of the line before (newline included); `position` is the sha256
    of the release's own line. TrustError naming the first broken line otherwise."""
    if len(data) > CHAIN_MAX_BYTES:
        raise TrustError(f"{where}: {len(data):,} bytes, over the {CHAIN_MAX_BYTES:,}-byte limit")
    try:
        text = data.decode("ascii")
    except UnicodeDecodeError:
        raise TrustError(f"{where}: not ASCII") from None
    if text and not text.endswith("\n"):
        raise TrustError(f"{where}: the last line has no newline (a truncated file?)")
    links: list[tuple[str, str, str, str]] = []
    prev = GENESIS
    last: tuple[int, int, int] | None = None
    for n, raw in enumerate(text.split("\n")[:-1], 1):
        if raw.startswith("#"):
            if links:
                raise TrustError(f"{where}:{n}: comments only before the first release")
            continue
        m = _LINE.fullmatch(raw)
        key = tag_key(m.group(1)) if m else None
        if m is None or key is None:
            raise TrustError(f"{where}:{n}: not `vX.Y.Z <sha256> <sha256>`")
        tag, digest, link = m.groups()
        if last is not None and key <= last:
            raise TrustError(f"{where}:{n}: {tag} does not come after {links[-1][0]}")
        if link != prev:
            raise TrustError(
                f"{where}:{n}: {tag} links to {link[:12]}..., but the line before it hashes to {prev[:12]}... "
                f"(a line before it was rewritten, removed or reordered)"
            )
        position = hashlib.sha256((raw + "\n").encode("ascii")).hexdigest()
        links.append((tag, digest, link, position))
        prev, last = position, key
    return links


def check_pin(pin: dict, links: list[tuple[str, str, str, str]] | None, tag: str, manifest_sha256: str):
    """(status, detail) when the chain does not extend the pin {"tag", "chain_length", "chain_head"} or does not
    hold release `tag` with these manifest bytes at or after it; None when it does."""
    length, head = pin["chain_length"], pin["chain_head"]
    if not links:
        return ROLLBACK, f"no release chain: an older copy of the releases than the {pin['tag']} the fork pinned"
    if length > len(links):
        return ROLLBACK, (
            f"the chain ends at {links[-1][0]} after {len(links)} release(s); the fork pinned {pin['tag']}, "
            f"release {length} (an older state of the releases presented as the latest)"
        )
    at = links[length - 1]
    if at[3] != head or at[0] != pin["tag"]:
        return HISTORY_REWRITTEN, (
            f"release {length} of the chain is {at[0]} at {at[3][:16]}, but the fork pinned {pin['tag']} at "
            f"{head[:16]}: the history the fork vendored from was rewritten"
        )
    where = next((i for i, link in enumerate(links) if link[0] == tag), None)
    if where is None:
        return HISTORY_REWRITTEN, f"{tag} is not in the release chain"
    if links[where][1] != manifest_sha256:
        return HISTORY_REWRITTEN, f"the manifest of {tag} is not the one the chain holds (its bytes were rewritten)"
    if where < length - 1:
        return ROLLBACK, f"{tag} comes before {pin['tag']}, which the fork pinned"
    return None


# ---------------------------------------------------------------- SSH signatures


def _string(buf: bytes, off: int) -> tuple[bytes, int]:
    if off + 4 > len(buf):
        raise TrustError("the signature is truncated")
    n = int.from_bytes(buf[off : off + 4], "big")
    end = off + 4 + n
    if end > len(buf):
        raise TrustError("the signature is truncated")
    return buf[off + 4 : end], end


def key_blob(key_line: str) -> bytes:
    """The SSH wire blob of an `ssh-ed25519 AAAA...` public key line (a trailing comment is allowed)."""
    parts = key_line.split()
    m = _KEY_LINE.fullmatch(" ".join(parts[:2])) if len(parts) >= 2 else None
    if m is None:
        raise TrustError("not an ssh-ed25519 public key")
    blob = base64.b64decode(m.group(1), validate=True)
    kind, off = _string(blob, 0)
    key, off = _string(blob, off)
    if kind != b"ssh-ed25519" or len(key) != 32 or off != len(blob):
        raise TrustError("not an ssh-ed25519 public key")
    return blob


def key_line(blob: bytes) -> str:
    return "ssh-ed25519 " + base64.b64encode(blob).decode("ascii")


def fingerprint(blob: bytes) -> str:
    """OpenSSH's SHA256 fingerprint of a public key blob (what `ssh-keygen -l` prints)."""
    return "SHA256:" + base64.b64encode(hashlib.sha256(blob).digest()).decode("ascii").rstrip("=")


def parse_signature(armored: bytes) -> tuple[str, bytes]:
    """(namespace, signer's public key blob) of one armored ed25519 SSHSIG; TrustError for anything else."""
    if len(armored) > SIG_MAX_BYTES:
        raise TrustError(f"the signature file is over {SIG_MAX_BYTES:,} bytes")
    m = _ARMOR.fullmatch(armored)
    if m is None:
        raise TrustError("the signature file is not one armored SSH signature")
    try:
        raw = base64.b64decode(b"".join(m.group(1).split()), validate=True)
    except ValueError:
        raise TrustError("the signature is not valid base64") from None
    if raw[:6] != b"SSHSIG" or raw[6:10] != (1).to_bytes(4, "big"):
        raise TrustError("not an SSHSIG version 1 signature")
    pub, off = _string(raw, 10)
    namespace, off = _string(raw, off)
    _, off = _string(raw, off)  # reserved
    hash_alg, off = _string(raw, off)
    sig, off = _string(raw, off)
    if off != len(raw):
        raise TrustError("the signature has trailing bytes")
    if hash_alg not in (b"sha512", b"sha256"):
        raise TrustError("the signature names an unknown hash")
    kind, soff = _string(sig, 0)
    value, soff = _string(sig, soff)
    if kind != b"ssh-ed25519" or len(value) != 64 or soff != len(sig):
        raise TrustError("not an ed25519 signature")
    key_blob(key_line(pub))  # the embedded key is an ed25519 key
    try:
        return namespace.decode("ascii"), pub
    except UnicodeDecodeError:
        raise TrustError("the signature's namespace is not ASCII") from None


def ssh_keygen() -> str | None:
    return shutil.which("ssh-keygen")


def verify_with_key(data: bytes, armored: bytes, expected: bytes, namespace: str, revoked: frozenset = frozenset()):
    """(status, detail): whether `armored` is a good `namespace` signature of `data` by the key blob `expected`.
    The envelope is checked here; the cryptography by ssh-keygen, given a temporary allowed-signers file that
    lists only that key (so nothing any repository lists decides it). `revoked`: fingerprints that sign nothing."""
    try:
        ns, signer = parse_signature(armored)
    except TrustError as e:
        return BAD_SIGNATURE, str(e)
    if ns != namespace:
        return BAD_SIGNATURE, f"a signature for {ns!r}, not {namespace!r} (made for something else)"
    if fingerprint(signer) in revoked:
        return REVOKED_SIGNER, f"signed by {fingerprint(signer)}, a revoked key"
    if signer != expected:
        return UNKNOWN_SIGNER, f"signed by {fingerprint(signer)}, not by {fingerprint(expected)}"
    exe = ssh_keygen()
    if exe is None:
        return COULD_NOT_CHECK, "ssh-keygen is not installed (OpenSSH >= 8.2 checks release signatures)"
    with tempfile.TemporaryDirectory(prefix="sm120-trust-") as tmp:
        allowed, sig = os.path.join(tmp, "allowed"), os.path.join(tmp, "sig")
        with open(allowed, "w", encoding="ascii") as fh:
            fh.write(f'signer namespaces="{namespace}" {key_line(expected)}\n')
        with open(sig, "wb") as fh:
            fh.write(armored)
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LC_ALL": "C"}  # no agent, no user configuration
        try:
            p = subprocess.run(
                [exe, "-Y", "verify", "-f", allowed, "-I", "signer", "-n", namespace, "-s", sig],
                input=data,
                capture_output=True,
                env=env,
                timeout=60,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired) as e:
            return COULD_NOT_CHECK, f"ssh-keygen could not run ({e})"
    if p.returncode != 0:
        return BAD_SIGNATURE, f"not a signature of these bytes by {fingerprint(expected)}"
    return TRUSTED, f"signed by {fingerprint(expected)}"


# ---------------------------------------------------------------- key rotation


def parse_rotation(data: bytes) -> tuple[str, bytes, bytes, str]:
    """(principal, old key blob, new key blob, from date) of a rotation statement; TrustError otherwise."""
    if len(data) > ROTATION_MAX_BYTES:
        raise TrustError("a rotation statement over 4 KiB")
    try:
        m = _ROTATION.fullmatch(data.decode("ascii"))
    except UnicodeDecodeError:
        m = None
    if m is None:
        raise TrustError(f"not a rotation statement (`{ROTATION_HEAD}`, principal, old, new, from)")
    old, new = key_blob(m.group(2)), key_blob(m.group(3))
    if old == new:
        raise TrustError("a rotation statement from a key to itself")
    return m.group(1), old, new, m.group(4)


def rotation_text(principal: str, old: bytes, new: bytes, start: str) -> bytes:
    if not _DATE.fullmatch(start):
        raise TrustError(f"rotation date {start!r} is not YYYY-MM-DD")
    if old == new:
        raise TrustError("a rotation statement from a key to itself")
    return (
        f"{ROTATION_HEAD}\nprincipal: {principal}\nold: {key_line(old)}\nnew: {key_line(new)}\nfrom: {start}\n"
    ).encode("ascii")


def walk(pinned: bytes, rotations: list, created: str) -> tuple[bytes, list]:
    """(the key that must have signed a release of date `created`, the rotations followed to it): start from the
    pinned key and follow verified rotations (old, new, from, ...) in date order whose old key is the current one
    and which took effect on or before that date."""
    key, followed = pinned, []
    for r in sorted(rotations, key=lambda r: r[2]):
        if r[0] == key and r[2] <= created:
            key = r[1]
            followed.append(r)
    return key, followed
