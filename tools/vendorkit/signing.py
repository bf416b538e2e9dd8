"""Release signatures: OpenSSH SSHSIG (ed25519) detached signatures over a manifest's exact bytes, made and checked
with `ssh-keygen -Y` in the fixed namespace NAMESPACE (docs/vendoring.md, "Signed releases", says why this format).

    vendor_manifests/signatures/vX.Y.Z.yaml.sig   the signature of vendor_manifests/vX.Y.Z.yaml
    vendor_manifests/allowed_signers              who may sign, in ssh-keygen's format; each key's valid-after /
                                                  valid-before are checked at the release's `created` date
    vendor_manifests/revoked_keys                 public keys that may sign nothing (one per line)

verify() answers one of OK, UNSIGNED, BAD_SIGNATURE, UNKNOWN_SIGNER, REVOKED_SIGNER or COULD_NOT_CHECK (no
ssh-keygen), with a sentence. ssh-keygen runs with a bare environment on files we write, never on a fork's.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass

from . import trust

NAMESPACE = trust.RELEASE_NAMESPACE
SIG_DIR = "signatures"
ALLOWED = "allowed_signers"
REVOKED = "revoked_keys"
MAX_SIG_BYTES = trust.SIG_MAX_BYTES
MAX_LIST_BYTES = 256 << 10
OK, UNSIGNED, BAD_SIGNATURE, UNKNOWN_SIGNER, REVOKED_SIGNER, COULD_NOT_CHECK = (
    "signed",
    "unsigned",
    "bad-signature",
    "unknown-signer",
    "revoked-signer",
    "could-not-check",
)
_FINGERPRINT = re.compile(r"\bSHA256:[A-Za-z0-9+/]{43}\b")


@dataclass(frozen=True)
class Verdict:
    status: str
    detail: str
    principal: str | None = None
    fingerprint: str | None = None


def signature_path(manifest_dir: str, tag: str) -> str:
    return os.path.join(manifest_dir, SIG_DIR, f"{tag}.yaml.sig")


def ssh_keygen() -> str | None:
    return shutil.which("ssh-keygen")


def _run(args: list[str], stdin: bytes | None = None) -> subprocess.CompletedProcess:
    exe = ssh_keygen()
    assert exe is not None  # callers check first
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LC_ALL": "C"}  # no agent, no user configuration
    return subprocess.run([exe, *args], input=stdin, capture_output=True, env=env, timeout=60, check=False)


def read_bounded(path: str, limit: int) -> bytes | None:
    """At most limit + 1 bytes of a file of this checkout (one more tells the caller it is over); None when absent."""
    try:
        with open(path, "rb") as fh:
            return fh.read(limit + 1)
    except (FileNotFoundError, NotADirectoryError):
        return None


def public_key(key_path: str) -> str:
    """The public key line of an OpenSSH private key (ssh-keygen -y)."""
    if ssh_keygen() is None:
        raise RuntimeError("ssh-keygen is not installed: signing needs OpenSSH >= 8.2")
    p = _run(["-y", "-f", key_path])
    if p.returncode != 0:
        raise RuntimeError(f"ssh-keygen -y could not read {key_path}: {p.stderr.decode(errors='replace').strip()}")
    return p.stdout.decode("ascii", "replace").strip()


def sign(manifest_path: str, key_path: str, out_path: str, namespace: str = NAMESPACE) -> None:
    """Sign a file's bytes with the private key at key_path (never copied anywhere) into out_path."""
    if ssh_keygen() is None:
        raise RuntimeError("ssh-keygen is not installed: signing needs OpenSSH >= 8.2")
    with tempfile.TemporaryDirectory(prefix="sm120-sign-") as tmp:
        work = os.path.join(tmp, "manifest")
        shutil.copyfile(manifest_path, work)
        p = _run(["-Y", "sign", "-f", key_path, "-n", namespace, work])
        if p.returncode != 0:
            raise RuntimeError(f"ssh-keygen -Y sign failed: {p.stderr.decode(errors='replace').strip()}")
        os.makedirs(os.path.dirname(out_path), exist_ok=True)
        shutil.copyfile(work + ".sig", out_path)
        os.chmod(out_path, 0o644)


def revoked_fingerprints(revoked_path: str) -> frozenset:
    """Fingerprints of the ed25519 public keys a revoked_keys file lists, one per line (only ed25519 keys can sign
    a release; other lines are skipped). Read up to MAX_LIST_BYTES: a revocation only ever takes trust away."""
    data = (read_bounded(revoked_path, MAX_LIST_BYTES) or b"")[:MAX_LIST_BYTES]
    out = set()
    for line in data.decode("ascii", "replace").splitlines():
        try:
            out.add(trust.fingerprint(trust.key_blob(line.strip())))
        except trust.TrustError:
            continue
    return frozenset(out)


def verify(data: bytes, sig_path: str, allowed_path: str, revoked_path: str, created: str) -> Verdict:
    """Whether the signature at sig_path is a good NAMESPACE signature of `data` by a key allowed_signers lets
    sign on the release date `created` (YYYY-MM-DD) and revoked_keys does not list."""
    sig = read_bounded(sig_path, MAX_SIG_BYTES)
    if sig is None:
        return Verdict(UNSIGNED, "no signature")
    if len(sig) > MAX_SIG_BYTES:
        return Verdict(BAD_SIGNATURE, f"the signature file is over {MAX_SIG_BYTES:,} bytes")
    try:  # the envelope (one armored ed25519 SSHSIG) is trust's to parse; ssh-keygen checks the cryptography
        trust.parse_signature(sig)
    except trust.TrustError as e:
        return Verdict(BAD_SIGNATURE, str(e))
    if ssh_keygen() is None:
        return Verdict(COULD_NOT_CHECK, "ssh-keygen is not installed (OpenSSH >= 8.2 checks release signatures)")
    with tempfile.TemporaryDirectory(prefix="sm120-verify-") as tmp:
        sig_copy = os.path.join(tmp, "sig")  # ssh-keygen reads the bytes we checked, not a file that may change
        with open(sig_copy, "wb") as fh:
            fh.write(sig)
        p = _run(["-Y", "check-novalidate", "-n", NAMESPACE, "-s", sig_copy], stdin=data)
        if p.returncode != 0:
            why = p.stderr.decode(errors="replace").strip().splitlines()
            return Verdict(BAD_SIGNATURE, f"not a signature of these bytes ({why[-1] if why else 'ssh-keygen failed'})")
        found = _FINGERPRINT.findall(p.stdout.decode(errors="replace"))
        fingerprint = found[0] if found else None
        if fingerprint is not None and fingerprint in revoked_fingerprints(revoked_path):
            return Verdict(REVOKED_SIGNER, f"signed by revoked key {fingerprint}", fingerprint=fingerprint)
        allowed = read_bounded(allowed_path, MAX_LIST_BYTES)
        if not allowed or len(allowed) > MAX_LIST_BYTES:
            return Verdict(UNKNOWN_SIGNER, "no allowed signers are listed", fingerprint=fingerprint)
        when = "-Overify-time=" + created.replace("-", "")
        p = _run(["-Y", "find-principals", "-s", sig_copy, "-f", allowed_path, when])
        principals = p.stdout.decode(errors="replace").split() if p.returncode == 0 else []
        if not principals:
            anytime = _run(["-Y", "find-principals", "-s", sig_copy, "-f", allowed_path])
            why = (
                f"its key {fingerprint} may not sign a release of {created} (outside its validity in {ALLOWED})"
                if anytime.returncode == 0
                else f"its key {fingerprint} is not in {ALLOWED}"
            )
            return Verdict(UNKNOWN_SIGNER, why, fingerprint=fingerprint)
        principal = principals[0]
        args = ["-Y", "verify", "-f", allowed_path, "-I", principal, "-n", NAMESPACE, "-s", sig_copy, when]
        if os.path.exists(revoked_path):
            args += ["-r", revoked_path]
        p = _run(args, stdin=data)
        if p.returncode != 0:
            return Verdict(BAD_SIGNATURE, "ssh-keygen -Y verify refused it", principal, fingerprint)
        return Verdict(OK, f"signed by {principal} ({fingerprint})", principal, fingerprint)
