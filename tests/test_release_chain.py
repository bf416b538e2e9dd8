"""Signed, chained releases (issue 45, first part): every release is a line of vendor_manifests/chain.txt linking
its manifest's exact bytes to the line before; `release` appends it and, given a key, signs; `sign` signs a past
release; the self-check verifies the chain and every signature and lists the unsigned releases. The adversarial
cases follow TUF's and Sigstore's conformance suites (wrong key, other bytes, another release's signature, a key
outside its validity, a revoked key, malformed signature files). Keys are made at test time, never committed."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import pytest
from vendor_helpers import ROOT, commit_all, make_canonical, run_cv, ssh_key

from vendorkit import chain, signing
from vendorkit.errors import ManifestError

needs_ssh_keygen = pytest.mark.skipif(shutil.which("ssh-keygen") is None, reason="ssh-keygen (OpenSSH) not installed")
MDIR = "vendor_manifests"


@pytest.fixture()
def canon(tmp_path) -> Path:
    return make_canonical(tmp_path)


def _allow(repo: Path, *entries: tuple[str, str]) -> None:
    """allowed_signers lines: (public key line, validity options)."""
    lines = [
        f'releases@deep_gemm_sm120 namespaces="{signing.NAMESPACE}"{"," + opts if opts else ""} {pub}\n'
        for pub, opts in entries
    ]
    (repo / MDIR / signing.ALLOWED).write_text("# test signers\n" + "".join(lines))


def _self_check(repo: Path) -> tuple[int, str]:
    code, out, err = run_cv("--repo", str(repo))
    return code, out + err


# ---------------------------------------------------------------- this repository


def test_this_repository_chains_every_release():
    from vendorkit.manifest import ManifestSet

    tags = [m.tag for m in ManifestSet.load_dir(str(ROOT / MDIR)).manifests]
    links = chain.read(str(ROOT / MDIR))
    assert [link.tag for link in links] == tags and chain.problems(str(ROOT / MDIR), tags) == []
    for link in links:
        assert link.manifest_sha256 == hashlib.sha256((ROOT / MDIR / f"{link.tag}.yaml").read_bytes()).hexdigest()


# ---------------------------------------------------------------- the chain's own format


def _three(tmp: Path) -> bytes:
    text = chain.HEADER.encode()
    prev = chain.GENESIS
    for i, tag in enumerate(("v0.1.0", "v0.2.0", "v0.3.0")):
        line = chain.line_for(tag, f"{i:x}" * 64, prev)
        text += line
        prev = hashlib.sha256(line).hexdigest()
    return text


def test_a_chain_parses_and_each_position_is_its_line(tmp_path):
    links = chain.parse(_three(tmp_path))
    assert [link.tag for link in links] == ["v0.1.0", "v0.2.0", "v0.3.0"]
    assert links[1].prev == links[0].position and links[2].prev == links[1].position


@pytest.mark.parametrize(
    "tamper, message",
    [
        (lambda lines: [lines[0], lines[1], lines[2].replace(" 1", " 9", 1), lines[3]], "v0.3.0 links to"),  # rewritten
        (lambda lines: [lines[0], lines[1], lines[3]], "v0.3.0 links to"),  # a middle release removed
        (lambda lines: [lines[0], lines[2], lines[1], lines[3]], "v0.2.0 links to"),  # reordered
        (lambda lines: [*lines, lines[-1]], "does not come after"),  # a release twice
        (lambda lines: [lines[0], lines[1], "v0.2.5 short\n", *lines[2:]], "not `vX.Y.Z"),
        (lambda lines: [*lines[:2], "# late comment\n", *lines[2:]], "comments only before"),
        (lambda lines: [*lines[:-1], lines[-1][:-1]], "no newline"),  # truncated
        (lambda lines: [lines[0], lines[1].replace("v0.1.0", "v0.01.0"), *lines[2:]], "not `vX.Y.Z"),
    ],
)
def test_a_tampered_chain_is_refused_naming_the_line(tmp_path, tamper, message):
    lines = _three(tmp_path).decode().splitlines(keepends=True)
    lines = [lines[0] + lines[1], *lines[2:]]  # the two header lines as one entry
    with pytest.raises(ManifestError, match=message):
        chain.parse("".join(tamper(lines)).encode())


def test_an_oversized_or_binary_chain_is_refused():
    with pytest.raises(ManifestError, match="limit"):
        chain.parse(b"#" * (chain.MAX_BYTES + 1))
    with pytest.raises(ManifestError, match="ASCII"):
        chain.parse(b"v0.1.0 \xff\n")


# ---------------------------------------------------------------- release, the self-check and the manifests


def test_release_appends_the_chain_line(canon):
    links = chain.read(str(canon / MDIR))
    assert [link.tag for link in links] == ["v0.1.0", "v0.2.0"]
    code, text = _self_check(canon)
    assert code == 0 and "chain: 2 release(s) linked" in text and "unsigned: v0.1.0, v0.2.0" in text


def test_a_rewritten_manifest_breaks_the_chain(canon):
    m = canon / MDIR / "v0.1.0.yaml"
    m.write_bytes(m.read_bytes().replace(b"created: 2026-12-01", b"created: 2026-11-01"))
    commit_all(canon, "rewrite history")
    code, text = _self_check(canon)
    assert code != 0 and "v0.1.0.yaml is not the manifest the chain holds" in text


def test_a_release_missing_from_the_chain_is_reported(canon):
    (canon / MDIR / chain.CHAIN_NAME).write_bytes(
        b"".join((canon / MDIR / chain.CHAIN_NAME).read_bytes().splitlines(keepends=True)[:-1])
    )
    code, text = _self_check(canon)
    assert code != 0 and "not chained yet: v0.2.0" in text


def test_a_chain_naming_a_release_that_does_not_exist_is_reported(canon):
    (canon / MDIR / "v0.2.0.yaml").unlink()
    code, text = _self_check(canon)
    assert code != 0 and "chains v0.1.0, v0.2.0; the releases are v0.1.0" in text


# ---------------------------------------------------------------- signatures


@needs_ssh_keygen
def test_release_signs_and_the_self_check_verifies(canon, tmp_path):
    key, pub = ssh_key(tmp_path, "k1")
    _allow(canon, (pub, 'valid-after="20261101"'))
    (canon / "device_layer/mma/sm120.cuh").write_bytes(b"// v3\n")
    commit_all(canon, "v3")
    code, out, err = run_cv("release", "v0.3.0", "--repo", str(canon), "--date", "2026-12-03", "--sign-key", str(key))
    assert code == 0 and "signatures/v0.3.0.yaml.sig" in out, err
    code, out, err = run_cv("sign", "v0.1.0", "--repo", str(canon), "--key", str(key))
    assert code == 0, err
    code, text = _self_check(canon)
    assert "signatures: 2 of 3 release(s) signed and verified" in text and "unsigned: v0.2.0" in text
    code, _, err = run_cv("sign", "v0.1.0", "--repo", str(canon), "--key", str(key))
    assert code == 3 and "never replaced" in err  # append-only


def _signed(canon: Path, tmp_path: Path, tag: str = "v0.2.0", allowed_opts: str = 'valid-after="20261101"'):
    key, pub = ssh_key(tmp_path, "k1")
    _allow(canon, (pub, allowed_opts))
    assert run_cv("sign", tag, "--repo", str(canon), "--key", str(key))[0] == 0
    return key, pub


def _verdict(canon: Path, tag: str = "v0.2.0") -> signing.Verdict:
    mdir = canon / MDIR
    created = {"v0.1.0": "2026-12-01", "v0.2.0": "2026-12-02"}[tag]
    return signing.verify(
        (mdir / f"{tag}.yaml").read_bytes(),
        signing.signature_path(str(mdir), tag),
        str(mdir / signing.ALLOWED),
        str(mdir / signing.REVOKED),
        created,
    )


@needs_ssh_keygen
def test_a_good_signature_verifies(canon, tmp_path):
    _signed(canon, tmp_path)
    v = _verdict(canon)
    assert v.status == signing.OK and v.principal == "releases@deep_gemm_sm120"


@needs_ssh_keygen
def test_a_key_not_allowed_is_an_unknown_signer(canon, tmp_path):
    _signed(canon, tmp_path)
    _, other = ssh_key(tmp_path, "k2")
    _allow(canon, (other, ""))  # the signing key is no longer listed
    assert _verdict(canon).status == signing.UNKNOWN_SIGNER
    code, text = _self_check(canon)
    assert code != 0 and "unknown-signer" in text


@needs_ssh_keygen
def test_a_signature_over_other_bytes_is_bad(canon, tmp_path):
    _signed(canon, tmp_path)
    m = canon / MDIR / "v0.2.0.yaml"
    m.write_bytes(m.read_bytes() + b"# appended\n")
    assert _verdict(canon).status == signing.BAD_SIGNATURE


@needs_ssh_keygen
def test_another_releases_signature_does_not_verify_this_one(canon, tmp_path):
    """Mix-and-match: v0.1.0's valid signature presented as v0.2.0's."""
    _signed(canon, tmp_path, tag="v0.1.0")
    sigs = canon / MDIR / signing.SIG_DIR
    shutil.copyfile(sigs / "v0.1.0.yaml.sig", sigs / "v0.2.0.yaml.sig")
    assert _verdict(canon, "v0.1.0").status == signing.OK
    assert _verdict(canon, "v0.2.0").status == signing.BAD_SIGNATURE


@needs_ssh_keygen
def test_a_key_used_outside_its_validity_is_refused(canon, tmp_path):
    """A rotated-in key used for a release made before its rotation (valid-after later than the release date)."""
    _signed(canon, tmp_path, allowed_opts='valid-after="20261203"')
    v = _verdict(canon)
    assert v.status == signing.UNKNOWN_SIGNER and "outside its validity" in v.detail


@needs_ssh_keygen
def test_a_revoked_key_is_refused(canon, tmp_path):
    _, pub = _signed(canon, tmp_path)
    (canon / MDIR / signing.REVOKED).write_text(pub + "\n")
    v = _verdict(canon)
    assert v.status == signing.REVOKED_SIGNER
    code, text = _self_check(canon)
    assert code != 0 and "revoked-signer" in text


@needs_ssh_keygen
@pytest.mark.parametrize(
    "mangle",
    [
        lambda sig: sig[: len(sig) // 2],  # truncated
        lambda sig: sig + b"A" * (signing.MAX_SIG_BYTES + 1),  # oversized
        lambda sig: b"not a signature\n",  # malformed
        lambda sig: sig.replace(b"-----END SSH SIGNATURE-----", b"-----END SSH SIGNATURE----"),
        lambda sig: sig[:40] + (b"B" if sig[40:41] != b"B" else b"C") + sig[41:],  # one byte of the body
    ],
)
def test_a_mangled_signature_file_is_bad_never_a_crash(canon, tmp_path, mangle):
    _signed(canon, tmp_path)
    path = Path(signing.signature_path(str(canon / MDIR), "v0.2.0"))
    path.write_bytes(mangle(path.read_bytes()))
    assert _verdict(canon).status == signing.BAD_SIGNATURE


def test_a_chain_rewritten_in_a_commit_is_caught_even_when_its_links_hold(canon):
    """Re-creating the whole file (here: another header, every link recomputed, so parse() accepts it) is not an
    append: the self-check compares every committed version with the next."""
    path = canon / MDIR / chain.CHAIN_NAME
    body = b"".join(ln for ln in path.read_bytes().splitlines(keepends=True) if not ln.startswith(b"#"))
    path.write_bytes(b"# another header\n" + body)
    chain.parse(path.read_bytes())  # still a valid chain
    commit_all(canon, "rewrite the chain")
    code, text = _self_check(canon)
    assert code != 0 and "rewritten in commit" in text and "append-only" in text
