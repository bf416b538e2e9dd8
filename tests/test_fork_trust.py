"""Forks pin, then verify offline (issue 45): --sync records the release's chain place and signer in the stamp;
every later check_vendor --fork, --sync and the vendored verifier hold the releases they are shown against
that pin. The adversarial cases follow TUF's and Sigstore's conformance suites and Go's checksum-database
client: wrong key, a signature over other bytes, another release's signature (mix-and-match), an older release
offered as the latest (rollback), a rewritten middle release re-signed with a key the pin does not know, a
rotated-in key used before its rotation, a revoked key, malformed signature files, a stamp pinning a digest
that is not in the chain. Keys are made at test time, never committed."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from vendor_helpers import PREFIX, V1, commit_all, make_canonical, make_fork, run_cv, run_json, ssh_key

from vendorkit import chain, signing, trust

pytestmark = pytest.mark.skipif(shutil.which("ssh-keygen") is None, reason="ssh-keygen (OpenSSH) not installed")
MDIR = "vendor_manifests"
STAMP = ".sm120-vendor.json"
VERIFY = ".sm120-vendor-verify.py"


def _allow(repo: Path, *pubs: str) -> None:
    lines = [f'releases@deep_gemm_sm120 namespaces="{signing.NAMESPACE}",valid-after="20261101" {p}\n' for p in pubs]
    (repo / MDIR / signing.ALLOWED).write_text("# test signers\n" + "".join(lines))


def _sign(repo: Path, tag: str, key: Path) -> None:
    sig = repo / MDIR / "signatures" / f"{tag}.yaml.sig"
    if sig.exists():
        sig.unlink()
    code, out, err = run_cv("sign", tag, "--key", str(key), "--repo", str(repo))
    assert code == 0, out + err


@pytest.fixture()
def signed(tmp_path):
    """(canonical repo with v0.1.0 and v0.2.0 signed by key A, A's private key path, tmp)."""
    canon = make_canonical(tmp_path)
    a, pub = ssh_key(tmp_path, "a")
    _allow(canon, pub)
    _sign(canon, "v0.1.0", a)
    _sign(canon, "v0.2.0", a)
    commit_all(canon, "sign")
    return canon, a, tmp_path


def _sync(canon: Path, fork: Path, tag: str, *extra: str) -> tuple[int, str]:
    code, out, err = run_cv("--repo", str(canon), "--fork", str(fork), "--tag", tag, "--sync", *extra)
    return code, out + err


def _check(canon: Path, fork: Path, *extra: str) -> tuple[int, dict]:
    return run_json("--repo", str(canon), "--fork", str(fork), *extra)


def _stamp(fork: Path) -> dict:
    return json.loads((fork / PREFIX / STAMP).read_text())


def _fork_at(canon: Path, tmp: Path, tag: str) -> Path:
    fork = make_fork(tmp, dict(V1))
    code, out = _sync(canon, fork, tag)
    assert code == 0, out
    return fork


def _trust(doc: dict) -> tuple[str, bool]:
    return doc["trust"]["status"], doc["trust"]["finding"]


# ---------------------------------------------------------------- pinning and the good paths


def test_sync_pins_the_release_place_and_signer(signed):
    canon, a, tmp = signed
    fork = _fork_at(canon, tmp, "v0.1.0")
    pin = _stamp(fork)["pin"]
    manifest = (canon / MDIR / "v0.1.0.yaml").read_bytes()
    line = chain.read(str(canon / MDIR))[0]
    assert pin["tag"] == "v0.1.0" and pin["manifest_sha256"] == hashlib.sha256(manifest).hexdigest()
    assert pin["chain_length"] == 1 and pin["chain_head"] == line.position
    assert pin["signer"]["key"].split()[:2] == (a.parent / "a.pub").read_text().split()[:2]
    assert pin["signature"] == (canon / MDIR / "signatures/v0.1.0.yaml.sig").read_text()
    code, doc = _check(canon, fork, "--tag", "v0.1.0")
    assert code == 0 and _trust(doc) == ("trusted", False) and doc["trust"]["pin"]["chain_length"] == 1
    code, out, _ = run_cv("--repo", str(canon), "--fork", str(fork), "--tag", "v0.1.0")
    assert "trust: trusted: signed by SHA256:" in out and "pinned v0.1.0 (release 1" in out


def test_a_later_release_by_the_pinned_key_is_trusted_and_sync_moves_the_pin(signed):
    canon, _, tmp = signed
    fork = _fork_at(canon, tmp, "v0.1.0")
    code, doc = _check(canon, fork)  # latest: v0.2.0; the fork is stale, the manifest trusted
    assert code == 1 and doc["verdict"] == "stale" and _trust(doc) == ("trusted", False)
    code, out = _sync(canon, fork, "v0.2.0")
    assert code == 0, out
    assert _stamp(fork)["pin"]["tag"] == "v0.2.0" and _stamp(fork)["pin"]["chain_length"] == 2


def test_the_vendored_verifier_checks_the_pinned_signature_offline(signed):
    canon, _, tmp = signed
    fork = _fork_at(canon, tmp, "v0.2.0")
    p = _verify(fork, "--format", "json")
    doc = json.loads(p.stdout)
    assert p.returncode == 0 and doc["trust"]["status"] == "trusted" and doc["trust"]["signer"].startswith("releases@")
    # the pinned signature, edited in the stamp, no longer verifies over the manifest the verifier carries
    stamp = _stamp(fork)
    stamp["pin"]["signature"] = (canon / MDIR / "signatures/v0.1.0.yaml.sig").read_text()  # another release's
    (fork / PREFIX / STAMP).write_text(json.dumps(stamp))
    p = _verify(fork)
    assert p.returncode == 1 and "trust: bad-signature" in p.stdout
    p = _verify(fork, "--skip-signature")
    assert p.returncode == 0 and "trust: could-not-check: signature not checked (--skip-signature)" in p.stdout


def _verify(fork: Path, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-I", str(fork / PREFIX / VERIFY), *args],
        capture_output=True,
        text=True,
        cwd=fork,
        timeout=60,
        env=env,
    )


# ---------------------------------------------------------------- signatures (TUF / Sigstore cases)


def test_a_release_signed_by_another_key_is_an_unknown_signer_and_sync_refuses(signed):
    canon, _, tmp = signed
    fork = _fork_at(canon, tmp, "v0.1.0")
    b, pub_b = ssh_key(tmp, "b")
    _allow(canon, (tmp / "keys/a.pub").read_text().strip(), pub_b)  # the host lists the attacker's key too
    _sign(canon, "v0.2.0", b)
    code, doc = _check(canon, fork)
    assert code == 1 and doc["verdict"] == "untrusted" and _trust(doc) == ("unknown-signer", True)
    assert "must be signed by the pinned key" in doc["trust"]["detail"]
    before = (fork / PREFIX / STAMP).read_bytes()
    code, out = _sync(canon, fork, "v0.2.0")
    assert code == 1 and "refuse   v0.2.0  (unknown-signer" in out and "--repin" in out
    assert (fork / PREFIX / STAMP).read_bytes() == before  # nothing written
    code, out = _sync(canon, fork, "v0.2.0", "--repin")  # after checking the new key out of band
    assert code == 0, out
    assert _stamp(fork)["pin"]["signer"]["key"].split()[1] == pub_b.split()[1]


def test_a_signature_over_other_bytes_is_bad(signed):
    canon, a, tmp = signed
    fork = _fork_at(canon, tmp, "v0.1.0")
    other = tmp / "other.yaml"
    other.write_bytes((canon / MDIR / "v0.2.0.yaml").read_bytes() + b"# one more line\n")
    sig = canon / MDIR / "signatures/v0.2.0.yaml.sig"
    sig.unlink()
    signing.sign(str(other), str(a), str(sig))
    code, doc = _check(canon, fork)
    assert code == 1 and _trust(doc) == ("bad-signature", True)


def test_another_releases_good_signature_does_not_verify_this_one(signed):
    """Mix-and-match: v0.1.0's valid signature presented as v0.2.0's."""
    canon, _, tmp = signed
    fork = _fork_at(canon, tmp, "v0.1.0")
    shutil.copyfile(canon / MDIR / "signatures/v0.1.0.yaml.sig", canon / MDIR / "signatures/v0.2.0.yaml.sig")
    code, doc = _check(canon, fork)
    assert code == 1 and _trust(doc) == ("bad-signature", True)


def test_a_signature_in_another_namespace_is_bad(signed):
    canon, a, tmp = signed
    fork = _fork_at(canon, tmp, "v0.1.0")
    sig = canon / MDIR / "signatures/v0.2.0.yaml.sig"
    sig.unlink()
    signing.sign(str(canon / MDIR / "v0.2.0.yaml"), str(a), str(sig), namespace="file")
    code, doc = _check(canon, fork)
    assert code == 1 and _trust(doc)[0] == "bad-signature" and "'file'" in doc["trust"]["detail"]


@pytest.mark.parametrize(
    "mangle",
    [
        lambda b: b[: len(b) // 2],  # truncated
        lambda b: b + b"A" * (trust.SIG_MAX_BYTES + 1),  # oversized
        lambda b: b"",  # empty
        lambda b: b"not a signature\n",
        lambda b: b.replace(b"-----END SSH SIGNATURE-----", b"-----END SSH SIGNATURE----- trailing"),
        lambda b: b.replace(b"\n", b"\r\n"),
        lambda b: b[:40] + (b"B" if b[40:41] != b"B" else b"C") + b[41:],  # one base64 character changed
    ],
)
def test_a_mangled_signature_file_is_bad_never_a_crash(signed, mangle):
    canon, _, tmp = signed
    fork = _fork_at(canon, tmp, "v0.1.0")
    sig = canon / MDIR / "signatures/v0.2.0.yaml.sig"
    sig.write_bytes(mangle(sig.read_bytes()))
    code, doc = _check(canon, fork)
    assert code == 1 and _trust(doc) in (("bad-signature", True), ("unknown-signer", True))


def test_a_revoked_key_signs_nothing(signed):
    canon, _, tmp = signed
    fork = _fork_at(canon, tmp, "v0.1.0")
    (canon / MDIR / signing.REVOKED).write_text((tmp / "keys/a.pub").read_text())
    code, doc = _check(canon, fork)
    assert code == 1 and _trust(doc) == ("revoked-signer", True)


def test_a_pinned_signer_then_an_unsigned_release_is_drift(signed):
    canon, _, tmp = signed
    fork = _fork_at(canon, tmp, "v0.1.0")
    (canon / MDIR / "signatures/v0.2.0.yaml.sig").unlink()
    code, doc = _check(canon, fork)
    assert code == 1 and _trust(doc) == ("unsigned", True)


def test_unsigned_releases_without_a_pinned_signer_are_a_note_unless_required(tmp_path):
    canon = make_canonical(tmp_path)
    fork = _fork_at(canon, tmp_path, "v0.2.0")
    assert _stamp(fork)["pin"]["signer"] is None and _stamp(fork)["pin"]["signature"] is None
    code, doc = _check(canon, fork)
    assert code == 0 and _trust(doc) == ("unsigned", False)
    code, doc = _check(canon, fork, "--require-signed")
    assert code == 1 and doc["verdict"] == "untrusted"
    p = _verify(fork)
    assert p.returncode == 0 and "trust: unsigned" in p.stdout
    assert _verify(fork, "--require-signed").returncode == 1


def test_without_ssh_keygen_a_pinned_signature_cannot_be_checked(signed, monkeypatch):
    canon, _, tmp = signed
    fork = _fork_at(canon, tmp, "v0.2.0")
    p = _verify(fork, env={**os.environ, "PATH": str(tmp / "empty")})
    assert p.returncode == 2 and "ssh-keygen is not installed" in p.stderr and "--skip-signature" in p.stderr
    monkeypatch.setattr(trust, "ssh_keygen", lambda: None)
    code, doc = _check(canon, fork)
    assert code == 2 and doc["verdict"] == "unknown" and "ssh-keygen is not installed" in " ".join(doc["errors"])


# ---------------------------------------------------------------- the chain against the pin


def _roll_back(canon: Path) -> None:
    """This checkout as it was before v0.2.0: its manifest, signature and chain line gone."""
    (canon / MDIR / "v0.2.0.yaml").unlink()
    (canon / MDIR / "signatures/v0.2.0.yaml.sig").unlink()
    text = (canon / MDIR / "chain.txt").read_bytes()
    (canon / MDIR / "chain.txt").write_bytes(text[: text.rindex(b"\nv0.2.0 ") + 1])


def test_an_older_state_of_the_releases_is_a_rollback(signed):
    canon, _, tmp = signed
    fork = _fork_at(canon, tmp, "v0.2.0")
    _roll_back(canon)
    code, doc = _check(canon, fork)
    assert code == 1 and _trust(doc) == ("rollback", True) and "ends at v0.1.0" in doc["trust"]["detail"]
    code, out = _sync(canon, fork, "v0.1.0")
    assert code == 1 and "refuse   v0.1.0  (rollback" in out


def test_an_older_release_checked_against_a_later_pin_is_a_rollback(signed):
    canon, _, tmp = signed
    fork = _fork_at(canon, tmp, "v0.2.0")
    code, doc = _check(canon, fork, "--tag", "v0.1.0")
    assert code == 1 and _trust(doc) == ("rollback", True) and "comes before v0.2.0" in doc["trust"]["detail"]


def _rewrite_history(canon: Path, key: Path) -> None:
    """v0.1.0 rewritten (another created date), every chain line after it redone, both re-signed with `key`."""
    m = canon / MDIR / "v0.1.0.yaml"
    m.write_text(m.read_text().replace("created: 2026-12-01", "created: 2026-11-30"))
    (canon / MDIR / "chain.txt").unlink()
    for tag in ("v0.1.0", "v0.2.0"):
        chain.append(str(canon / MDIR), tag)
        _sign(canon, tag, key)


def test_a_rewritten_middle_release_re_signed_by_another_key_is_history_rewritten(signed):
    canon, _, tmp = signed
    fork = _fork_at(canon, tmp, "v0.1.0")
    c, pub_c = ssh_key(tmp, "c")
    _allow(canon, pub_c)
    _rewrite_history(canon, c)
    code, doc = _check(canon, fork)
    assert code == 1 and _trust(doc) == ("history-rewritten", True)
    assert "the history the fork vendored from was rewritten" in doc["trust"]["detail"]
    p = _verify(fork, "--chain", str(canon / MDIR / "chain.txt"))
    assert p.returncode == 1 and "trust: history-rewritten" in p.stdout


def test_the_verifier_catches_a_truncated_or_rewritten_chain(signed):
    canon, _, tmp = signed
    fork = _fork_at(canon, tmp, "v0.2.0")
    good = canon / MDIR / "chain.txt"
    p = _verify(fork, "--chain", str(good))
    assert p.returncode == 0 and "trust: trusted" in p.stdout
    short = tmp / "short.txt"
    short.write_bytes(good.read_bytes()[: good.read_bytes().rindex(b"\nv0.2.0 ") + 1])
    p = _verify(fork, "--chain", str(short))
    assert p.returncode == 1 and "trust: rollback" in p.stdout
    broken = tmp / "broken.txt"
    broken.write_bytes(good.read_bytes().replace(b"v0.2.0 ", b"v0.2.1 "))
    p = _verify(fork, "--chain", str(broken))
    assert p.returncode == 1 and "trust: history-rewritten" in p.stdout
    garbage = tmp / "garbage.txt"
    garbage.write_bytes(b"v0.1.0 not a chain\n")
    p = _verify(fork, "--chain", str(garbage))
    assert p.returncode == 3 and "not `vX.Y.Z" in p.stderr


def test_a_stamp_pinning_a_digest_not_in_the_chain_is_history_rewritten(signed):
    canon, _, tmp = signed
    fork = _fork_at(canon, tmp, "v0.2.0")
    stamp = _stamp(fork)
    stamp["pin"]["chain_head"] = "ab" * 32
    (fork / PREFIX / STAMP).write_text(json.dumps(stamp))
    code, doc = _check(canon, fork)
    assert code == 1 and _trust(doc) == ("history-rewritten", True)
    p = _verify(fork)
    assert p.returncode == 1 and "the stamp's pin is not the release this verifier carries" in p.stdout


def test_a_manifest_not_the_chained_bytes_is_history_rewritten(signed):
    canon, _, tmp = signed
    fork = _fork_at(canon, tmp, "v0.1.0")
    m = canon / MDIR / "v0.2.0.yaml"
    m.write_text(m.read_text().replace("created: 2026-12-02", "created: 2026-12-03"))
    code, doc = _check(canon, fork)
    assert code == 1 and _trust(doc) == ("history-rewritten", True) and "not the one the chain holds" in str(doc)


# ---------------------------------------------------------------- key rotation


def _rotate(canon: Path, old: Path, new_pub: Path, start: str) -> tuple[int, str]:
    code, out, err = run_cv(
        "rotate", "--key", str(old), "--new-key", str(new_pub), "--from", start, "--repo", str(canon)
    )
    return code, out + err


def test_a_rotation_signed_by_the_pinned_key_carries_the_trust(signed):
    canon, a, tmp = signed
    fork = _fork_at(canon, tmp, "v0.1.0")
    b, _ = ssh_key(tmp, "b")
    code, out = _rotate(canon, a, tmp / "keys/b.pub", "2026-12-02")
    assert code == 0, out
    _sign(canon, "v0.2.0", b)
    code, doc = _check(canon, fork)
    assert _trust(doc) == ("trusted", False), doc["trust"]
    code, out, _ = run_cv("--repo", str(canon))  # the self-check agrees: allowed_signers was updated to match
    assert code == 0 and "key rotation: SHA256:" in out and "2 of 2 release(s) signed" in out, out
    code, out = _sync(canon, fork, "v0.2.0")
    assert code == 0 and _stamp(fork)["pin"]["signer"]["key"].split()[1] == (tmp / "keys/b.pub").read_text().split()[1]


def test_a_rotated_in_key_used_before_its_rotation_is_an_unknown_signer(signed):
    canon, a, tmp = signed
    fork = _fork_at(canon, tmp, "v0.1.0")
    b, _ = ssh_key(tmp, "b")
    code, out = _rotate(canon, a, tmp / "keys/b.pub", "2026-12-03")  # after v0.2.0's date (2026-12-02)
    assert code == 0, out
    _sign(canon, "v0.2.0", b)
    code, doc = _check(canon, fork)
    assert code == 1 and _trust(doc) == ("unknown-signer", True)


def test_a_rotation_not_signed_by_the_old_key_is_not_followed(signed):
    canon, a, tmp = signed
    fork = _fork_at(canon, tmp, "v0.1.0")
    b, _ = ssh_key(tmp, "b")
    code, out = _rotate(canon, a, tmp / "keys/b.pub", "2026-12-02")
    assert code == 0, out
    (stmt,) = (canon / MDIR / "rotations").glob("*.txt")
    Path(str(stmt) + ".sig").unlink()
    signing.sign(str(stmt), str(b), str(stmt) + ".sig", trust.ROTATION_NAMESPACE)  # the new key vouching for itself
    _sign(canon, "v0.2.0", b)
    code, doc = _check(canon, fork)
    assert code == 1 and _trust(doc) == ("unknown-signer", True)
    code, out, _ = run_cv("--repo", str(canon))
    assert code == 1 and "rotations/" in out and "unknown-signer" in out


def test_rotate_refuses_an_unlisted_or_revoked_old_key(signed):
    canon, a, tmp = signed
    ssh_key(tmp, "b")
    x, _ = ssh_key(tmp, "x")
    code, out = _rotate(canon, x, tmp / "keys/b.pub", "2026-12-05")
    assert code == 3 and "not in allowed_signers" in out
    (canon / MDIR / signing.REVOKED).write_text((tmp / "keys/a.pub").read_text())
    code, out = _rotate(canon, a, tmp / "keys/b.pub", "2026-12-05")
    assert code == 3 and "revoked" in out


# ---------------------------------------------------------------- the shared parsers


def test_signature_envelopes_are_parsed_strictly(signed):
    canon, _, tmp = signed
    armored = (canon / MDIR / "signatures/v0.1.0.yaml.sig").read_bytes()
    ns, blob = trust.parse_signature(armored)
    assert (
        ns == trust.RELEASE_NAMESPACE and trust.key_line(blob).split()[1] == (tmp / "keys/a.pub").read_text().split()[1]
    )
    fp = subprocess.run(["ssh-keygen", "-l", "-f", str(tmp / "keys/a.pub")], capture_output=True, text=True).stdout
    assert trust.fingerprint(blob) in fp  # the same fingerprint OpenSSH prints
    for bad in (b"", armored[:-40] + b"\n", armored.replace(b"SSH SIGNATURE", b"PGP SIGNATURE")):
        with pytest.raises(trust.TrustError):
            trust.parse_signature(bad)


def test_rotation_statements_are_parsed_strictly(tmp_path):
    _, pub_a = ssh_key(tmp_path, "a")
    _, pub_b = ssh_key(tmp_path, "b")
    a, b = trust.key_blob(pub_a), trust.key_blob(pub_b)
    text = trust.rotation_text("releases@deep_gemm_sm120", a, b, "2026-12-10")
    assert trust.parse_rotation(text) == ("releases@deep_gemm_sm120", a, b, "2026-12-10")
    for bad in (text + b"extra\n", text.replace(b"from: 2026-12-10", b"from: tomorrow"), text[:-1], b"\xff"):
        with pytest.raises(trust.TrustError):
            trust.parse_rotation(bad)
    with pytest.raises(trust.TrustError):
        trust.rotation_text("p", a, a, "2026-12-10")  # a key to itself
    assert trust.walk(a, [(a, b, "2026-12-10")], "2026-12-09")[0] == a
    assert trust.walk(a, [(a, b, "2026-12-10")], "2026-12-10")[0] == b
    assert trust.walk(b, [(a, b, "2026-12-10")], "2026-12-11")[0] == b  # a rotation from another key: not followed


# ---------------------------------------------------------------- red-team round 1 (each break a test)


def _release_deeper(canon: Path, tag: str, date: str) -> None:
    """A release listing the fork's files one directory deeper (include/deep_gemm/...): auto-detection by
    released paths alone would then take the fork's copy for `deep_gemm/` and never read the stamp (and pin)."""
    from vendor_helpers import V2, write_tree

    shutil.rmtree(canon / "device_layer")
    write_tree(canon / "device_layer" / "include/deep_gemm", V2)
    commit_all(canon, "deeper")
    code, out, err = run_cv("release", tag, "--repo", str(canon), "--date", date)
    assert code == 0, out + err
    commit_all(canon, f"release {tag}")


def test_releases_one_directory_deeper_cannot_move_the_check_off_the_stamp(signed):
    canon, _, tmp = signed
    fork = _fork_at(canon, tmp, "v0.2.0")
    _release_deeper(canon, "v0.3.0", "2026-12-04")  # unsigned, by a host without the pinned key
    code, doc = _check(canon, fork)
    assert doc["prefix"] == PREFIX and code == 1 and _trust(doc) == ("unsigned", True)
    before = (fork / PREFIX / STAMP).read_bytes()
    code, out = _sync(canon, fork, "v0.3.0")
    assert code == 1 and "refuse   v0.3.0  (unsigned" in out
    assert (fork / PREFIX / STAMP).read_bytes() == before and not (fork / "deep_gemm" / STAMP).exists()


def test_a_second_stamp_or_released_files_outside_the_stamp_are_ambiguous(signed):
    canon, _, tmp = signed
    fork = _fork_at(canon, tmp, "v0.2.0")
    (fork / "vendor2").mkdir()
    shutil.copyfile(fork / PREFIX / STAMP, fork / "vendor2" / STAMP)
    code, out, err = run_cv("--repo", str(canon), "--fork", str(fork))
    assert code == 3 and "stamps (.sm120-vendor.json) under" in err and "vendor2" in err
    (fork / "vendor2" / STAMP).unlink()
    shutil.copytree(fork / PREFIX / "common", fork / "vendor2" / "common")
    code, out, err = run_cv("--repo", str(canon), "--fork", str(fork))
    assert code == 3 and "(the stamp)" in err and "vendor2" in err


def test_a_manifest_with_a_character_outside_the_bmp_bakes_into_a_working_verifier(tmp_path):
    canon = make_canonical(tmp_path)
    m = canon / MDIR / "v0.2.0.yaml"
    m.write_bytes("# release notes: \U0001f642\n".encode() + m.read_bytes())
    (canon / MDIR / "chain.txt").unlink()
    for tag in ("v0.1.0", "v0.2.0"):
        chain.append(str(canon / MDIR), tag)
    commit_all(canon, "a comment")
    fork = _fork_at(canon, tmp_path, "v0.2.0")
    p = _verify(fork, "--chain", str(canon / MDIR / "chain.txt"))
    assert p.returncode == 0 and "trust: unsigned" in p.stdout, p.stdout + p.stderr
    assert "\U0001f642" in (fork / PREFIX / VERIFY).read_text(encoding="utf-8")


def test_the_strict_manifest_reader_is_linear_on_hostile_lines():
    import time

    from vendorkit import manifest_text
    from vendorkit.errors import ManifestError

    for line in ("tag: a" + " " * 400_000 + "#", "tag: a" + " b" * 200_000 + "#"):
        t0 = time.perf_counter()
        with pytest.raises(ManifestError):
            manifest_text.parse(line + "\n", "hostile.yaml")
        assert time.perf_counter() - t0 < 2.0  # quadratic backtracking took minutes at this size


def test_a_self_signed_rotation_to_the_pinned_key_cannot_rename_the_signer(signed):
    canon, a, tmp = signed
    fork = _fork_at(canon, tmp, "v0.1.0")
    c, pub_c = ssh_key(tmp, "c")
    rdir = canon / MDIR / "rotations"
    rdir.mkdir()
    stmt = rdir / "2026-11-01-x.txt"
    pub_a = (tmp / "keys/a.pub").read_text()
    stmt.write_bytes(
        trust.rotation_text("maintainer-approved", trust.key_blob(pub_c), trust.key_blob(pub_a), "2026-11-01")
    )
    signing.sign(str(stmt), str(c), str(stmt) + ".sig", trust.ROTATION_NAMESPACE)  # a good statement, by C
    code, doc = _check(canon, fork)
    assert _trust(doc) == ("trusted", False) and doc["trust"]["signer"].startswith("releases@deep_gemm_sm120 ")
    code, out = _sync(canon, fork, "v0.2.0")
    assert code == 0 and _stamp(fork)["pin"]["signer"]["principal"] == "releases@deep_gemm_sm120"


def test_a_backdated_release_after_the_pin_is_a_rollback(signed):
    canon, _, tmp = signed
    fork = _fork_at(canon, tmp, "v0.2.0")  # created 2026-12-02
    _release_deeper(canon, "v0.3.0", "2026-12-03")
    m = canon / MDIR / "v0.3.0.yaml"
    m.write_text(m.read_text().replace("created: 2026-12-03", "created: 2026-12-01"))
    text = (canon / MDIR / "chain.txt").read_bytes()
    (canon / MDIR / "chain.txt").write_bytes(text[: text.rindex(b"\nv0.3.0 ") + 1])
    chain.append(str(canon / MDIR), "v0.3.0")
    code, doc = _check(canon, fork, "--prefix", PREFIX)
    assert code == 1 and _trust(doc) == ("rollback", True) and "backdated" in doc["trust"]["detail"]
    code, out, _ = run_cv("--repo", str(canon))
    assert code == 1 and "v0.3.0.yaml is dated 2026-12-01, before v0.2.0" in out
    (canon / "device_layer/include/deep_gemm/common/sm120_new.cuh").write_text("#pragma once\n")
    commit_all(canon, "a new header")
    code, out, err = run_cv("release", "v0.4.0", "--repo", str(canon), "--date", "2026-11-30")
    assert code == 3 and "refusing to release v0.4.0 dated 2026-11-30" in err


@pytest.mark.parametrize(
    "args, message",
    [
        (("--from", "2026-13-45"), "is not a date"),
        (("--from", "2026-12-\u0661\u0662"), "is not a date"),
        (("--from", "2026-12-10", "--principal", "a b"), "--principal"),
        (("--from", "2026-12-10", "--principal", "r\u00e9leases"), "--principal"),
    ],
)
def test_rotate_refuses_impossible_dates_and_principals(signed, args, message):
    canon, a, tmp = signed
    ssh_key(tmp, "b")
    code, out, err = run_cv(
        "rotate", "--key", str(a), "--new-key", str(tmp / "keys/b.pub"), *args, "--repo", str(canon)
    )
    assert code == 3 and message in err, out + err
    assert not (canon / MDIR / "rotations").exists()


# ---------------------------------------------------------------- red-team round 2 (each break a test)


def test_the_watcher_counts_an_untrusted_downstream_as_failing():
    from vendorkit import watch
    from vendorkit.compare import Report

    report = Report(mode="fork", target="github:o/r@main", tag="v0.2.0", prefix=PREFIX, digest_kind="sha256")
    report.verdict, report.trust = "untrusted", {"status": "rollback"}
    ds = watch.Downstream(name="o/r", repo="o/r", ref="main", prefix=PREFIX, track="latest")
    res = watch.ForkResult(ds, report)
    assert watch.exit_code([res]) == 1 and "untrusted" in watch.FAILING_VERDICTS
    assert "(rollback)" in watch.issue_title(res)


@pytest.mark.parametrize(
    "path",
    [
        ".git/hooks/sm120_pre.cuh",
        ".GIT/config",
        ".github/workflows/sm120_x.yml",
        "a/.gitattributes",
        "x/.sm120-vendor.json",
        ".sm120-vendor-verify.py",
        ".sm120-sync-backup/sm120_a.cuh",
        ".sm120-sync-journal-x/sm120_a.cuh",
    ],
)
def test_a_manifest_never_ships_what_git_or_check_vendor_reads(path):
    from vendorkit.errors import ManifestError
    from vendorkit.manifest import FileEntry, build_manifest, dump_manifest, parse_manifest

    m = build_manifest("v0.3.0", "2026-12-04", [FileEntry(path, "0" * 64, "0" * 40, 1, "100644")])
    with pytest.raises(ManifestError, match="a release never ships"):
        parse_manifest(dump_manifest(m), "v0.3.0.yaml")


def test_our_manifests_hold_only_sm120_files(tmp_path):
    from vendorkit.errors import ManifestError
    from vendorkit.manifest import FileEntry, ManifestSet, build_manifest, dump_manifest

    canon = make_canonical(tmp_path)
    m = build_manifest("v0.3.0", "2026-12-04", [FileEntry("common/hook.sh", "0" * 64, "0" * 40, 1, "100755")])
    (canon / MDIR / "v0.3.0.yaml").write_text(dump_manifest(m))
    with pytest.raises(ManifestError, match="files not named sm120_"):
        ManifestSet.load_dir(str(canon / MDIR))
    code, out, err = run_cv("--repo", str(canon))
    assert code == 3 and "not named sm120_" in err


def test_a_root_layout_fork_with_this_checkout_inside_is_left_alone(signed):
    from vendor_helpers import V2, git, write_tree

    canon, _, tmp = signed
    fork = tmp / "rootfork"
    write_tree(fork, {"README.md": b"fork\n", **V2})
    subprocess.run(["git", "clone", "-q", str(canon), str(fork / ".sm120")], check=True)
    co = fork / ".sm120"
    code, out, err = run_cv("--repo", str(co), "--fork", str(fork), "--tag", "v0.2.0", "--sync")
    assert code == 0, out + err
    (fork / "scheduler/sm120_gemm.cuh").unlink()  # the checkout has the same bytes under .sm120/device_layer/
    code, out, err = run_cv("--repo", str(co), "--fork", str(fork), "--sync")
    assert code == 0 and "delete" not in out, out + err
    assert (co / "device_layer/scheduler/sm120_gemm.cuh").exists() and git(co, "status", "--porcelain").strip() == ""
    code, doc = run_json("--repo", str(co), "--fork", str(fork), "--strict")
    assert not any(f["path"].startswith(".sm120/") for f in doc["files"])


def test_a_backdated_release_between_the_pin_and_the_head_is_a_rollback(signed):
    canon, a, tmp = signed
    fork = _fork_at(canon, tmp, "v0.2.0")
    _release_deeper(canon, "v0.3.0", "2026-12-11")
    (canon / "device_layer/include/deep_gemm/common/sm120_new.cuh").write_text("#pragma once\n")
    commit_all(canon, "a new header")
    code, out, err = run_cv("release", "v0.4.0", "--repo", str(canon), "--date", "2026-12-11")
    assert code == 0, out + err
    m = canon / MDIR / "v0.4.0.yaml"  # the holder of a retired key backdates the next release
    m.write_text(m.read_text().replace("created: 2026-12-11", "created: 2026-12-05"))
    text = (canon / MDIR / "chain.txt").read_bytes()
    (canon / MDIR / "chain.txt").write_bytes(text[: text.rindex(b"\nv0.4.0 ") + 1])
    chain.append(str(canon / MDIR), "v0.4.0")
    _sign(canon, "v0.3.0", a)
    _sign(canon, "v0.4.0", a)
    code, doc = _check(canon, fork, "--prefix", PREFIX)
    assert code == 1 and _trust(doc) == ("rollback", True) and "v0.4.0 is dated 2026-12-05" in doc["trust"]["detail"]


def test_repin_keeps_a_pin_the_release_extends_and_names_what_it_drops(signed):
    canon, a, tmp = signed
    fork = _fork_at(canon, tmp, "v0.1.0")
    _allow(canon)  # the host no longer lists A: the pin still proves v0.2.0
    code, out = _sync(canon, fork, "v0.2.0", "--repin")
    assert code == 0 and "pinning it afresh" not in out, out
    assert _stamp(fork)["pin"]["signer"]["key"].split()[1] == (tmp / "keys/a.pub").read_text().split()[1]
    (canon / MDIR / "signatures/v0.2.0.yaml.sig").unlink()
    fork2 = tmp / "second"
    shutil.copytree(fork, fork2)
    code, out = _sync(canon, fork2, "v0.1.0")
    assert code == 1 and "to move the fork back on purpose, pass --repin" in out


def test_require_signed_holds_for_a_lineage_too(tmp_path):
    from vendorkit import forktrust
    from vendorkit.manifest import ManifestSet

    canon = make_canonical(tmp_path)
    ms = ManifestSet.load_dir(str(canon / MDIR))
    ms.lineage = "upstream"
    t = forktrust.evaluate(ms, ms.latest, None, require_signed=True)
    assert t is not None and t.status == "unsigned" and t.finding
    assert not forktrust.evaluate(ms, ms.latest, None).finding


def test_a_non_ascii_pinned_signature_is_an_invalid_stamp_for_both_tools(signed):
    canon, _, tmp = signed
    fork = _fork_at(canon, tmp, "v0.2.0")
    stamp = _stamp(fork)
    stamp["pin"]["signature"] = stamp["pin"]["signature"].replace("A", "\u00c5", 1)
    (fork / PREFIX / STAMP).write_text(json.dumps(stamp))
    code, doc = _check(canon, fork)
    assert code == 1 and any(f.get("diagnosis") == "invalid-stamp" for f in doc["files"])
    assert _verify(fork).returncode == 1
