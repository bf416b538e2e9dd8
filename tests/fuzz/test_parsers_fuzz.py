"""Property-based fuzzing of every parser check_vendor feeds hostile bytes to: release and lineage manifests, stamps,
archives (zip and tar), index pages (PEP 691 JSON, PEP 503 HTML), git object databases (loose objects, packs,
indexes, refs) and the bounded diff. Each target starts from valid input and mutates it; the
property is always the same: a typed result or a typed error (exit 2 or 3), never another exception.

`SM120_FUZZ_EXAMPLES` sets the examples per target: a small number in the default test command, thousands in
the CI job `fuzz` (.github/workflows/ci.yml). Every finding becomes a regression test in tests/adversarial."""

from __future__ import annotations

import io
import json
import os
import shutil
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))
sys.path.insert(0, str(ROOT / "tests"))

from vendorkit.errors import VendorError

EXAMPLES = int(os.environ.get("SM120_FUZZ_EXAMPLES", "40"))
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=EXAMPLES <= 100,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow, HealthCheck.data_too_large],
)
TOKENS = [
    b"\0",
    b"\xff",
    b"\n",
    b"\r\n",
    b"[",
    b"{",
    b"}",
    b"]",
    b'"',
    b"\\",
    b"9" * 40,
    b"-1",
    b"/",
    b"..",
    b"PK\x03\x04",
    b"PK\x05\x06",
    b"\x78\x9c",
    b"\xff\xff\xff\xff",
    b"  - ",
    b": ",
    b"\t",
    b"#",
]


@st.composite
def mutated(draw, seed: bytes):
    """`seed` with a few random edits: flips, cuts, insertions of interesting tokens, duplicated slices."""
    data = bytearray(seed)
    for _ in range(draw(st.integers(0, 6))):
        if not data:
            data += draw(st.binary(max_size=16))
            continue
        at = draw(st.integers(0, len(data) - 1))
        op = draw(st.sampled_from(["flip", "cut", "insert", "dup", "truncate", "set"]))
        if op == "flip":
            data[at] ^= 1 << draw(st.integers(0, 7))
        elif op == "cut":
            del data[at : at + draw(st.integers(1, 64))]
        elif op == "insert":
            data[at:at] = draw(st.sampled_from(TOKENS)) * draw(st.integers(1, 4))
        elif op == "dup":
            n = draw(st.integers(1, 256))
            data[at:at] = data[at : at + n] * draw(st.integers(1, 8))
        elif op == "truncate":
            del data[at:]
        else:
            data[at] = draw(st.integers(0, 255))
    return bytes(data)


def _typed(fn, *args):
    """Run `fn`; only a result or one of the tools' typed errors may come out."""
    try:
        return fn(*args)
    except VendorError:
        return None


# ---------------------------------------------------------------- manifests


def _manifest_text() -> str:
    from vendorkit.manifest import ManifestSet, dump_manifest

    return dump_manifest(ManifestSet.load_dir(str(ROOT / "vendor_manifests")).latest)


SEED_MANIFEST = _manifest_text().encode()


@FUZZ
@given(data=mutated(SEED_MANIFEST))
def test_fuzz_release_manifest(data):
    from vendorkit.manifest import parse_manifest

    _typed(parse_manifest, data.decode("utf-8", "replace"), "fuzz.yaml")


SEED_LINEAGE = (
    (ROOT / "vendor_manifests/upstreams/deepgemm-sm120/v0.1.5.json").read_bytes()
    if (ROOT / "vendor_manifests/upstreams/deepgemm-sm120/v0.1.5.json").exists()
    else b"{}"
)


@FUZZ
@given(data=mutated(SEED_LINEAGE))
def test_fuzz_lineage_manifest(data):
    from vendorkit import lineage

    _typed(lineage.parse, data.decode("utf-8", "replace"), "fuzz.json")
    _typed(lineage.from_vendor_json, data.decode("utf-8", "replace"), "VENDOR-sm120.json", None)


# ---------------------------------------------------------------- release trust (chain, signatures, rotations)


def _ssh_string(b: bytes) -> bytes:
    return len(b).to_bytes(4, "big") + b


def _seed_signature() -> tuple[str, bytes]:
    """A structurally valid armored ed25519 SSHSIG (the parser checks the envelope, not the cryptography)."""
    import base64

    pub = _ssh_string(b"ssh-ed25519") + _ssh_string(bytes(range(32)))
    sig = _ssh_string(b"ssh-ed25519") + _ssh_string(bytes(range(64)))
    raw = b"SSHSIG" + (1).to_bytes(4, "big") + _ssh_string(pub) + _ssh_string(b"deep_gemm_sm120-release")
    raw += _ssh_string(b"") + _ssh_string(b"sha512") + _ssh_string(sig)
    body = base64.b64encode(raw)
    lines = b"".join(body[i : i + 70] + b"\n" for i in range(0, len(body), 70))
    key = "ssh-ed25519 " + base64.b64encode(pub).decode()
    return key, b"-----BEGIN SSH SIGNATURE-----\n" + lines + b"-----END SSH SIGNATURE-----\n"


_SEED_KEY, _SEED_SIG = _seed_signature()
SEED_CHAIN = (ROOT / "vendor_manifests/chain.txt").read_bytes()


@FUZZ
@given(chain=mutated(SEED_CHAIN), sig=mutated(_SEED_SIG), length=st.integers(-2, 40))
def test_fuzz_trust_inputs(chain, sig, length):
    """The chain, signature envelopes and rotation statements: a result or TrustError; a parsed chain held
    against any pin gives a status or None, never an exception."""
    from vendorkit import trust

    try:
        links = trust.chain_links(chain)
    except trust.TrustError:
        links = None
    if links:
        pin = {
            "tag": links[0][0],
            "chain_length": max(1, length),
            "chain_head": links[min(len(links), max(1, length)) - 1][3],
        }
        found = trust.check_pin(pin, links, links[-1][0], links[-1][1])
        assert found is None or found[0] in (trust.ROLLBACK, trust.HISTORY_REWRITTEN)
    try:
        ns, blob = trust.parse_signature(sig)
        assert isinstance(ns, str) and trust.fingerprint(blob).startswith("SHA256:")
    except trust.TrustError:
        pass
    key = trust.key_blob(_SEED_KEY)
    statement = trust.rotation_text("releases@deep_gemm_sm120", key, key[:-1] + b"\x01", "2026-12-10")
    try:
        trust.parse_rotation(sig[: len(statement)] if length % 2 else statement[: max(0, length * 9)] + sig[:8])
    except trust.TrustError:
        pass


# ---------------------------------------------------------------- stamps


def _stamp_seed() -> bytes:
    from vendorkit.manifest import ManifestSet
    from vendorkit.stamp import stamp_text

    m = ManifestSet.load_dir(str(ROOT / "vendor_manifests")).latest
    pin = {"tag": m.tag, "manifest_sha256": "1" * 64, "chain_length": 3, "chain_head": "2" * 64}
    pin["signer"] = {"principal": "releases@deep_gemm_sm120", "key": _SEED_KEY}
    pin["signature"] = _SEED_SIG.decode()
    doc = json.loads(stamp_text(m, pin=pin))
    doc["patches"] = [
        {
            "path": m.files[0].path,
            "base_sha256": m.files[0].sha256,
            "patched_sha256": "0" * 64,
            "reason": "fuzz",
            "upstream": "https://x",
        }
    ]
    return json.dumps(doc).encode()


SEED_STAMP = _stamp_seed()


@FUZZ
@given(data=mutated(SEED_STAMP))
def test_fuzz_stamp(data):
    from vendorkit.manifest import ManifestSet
    from vendorkit.stamp import read_stamp, verifier

    ms = ManifestSet.load_dir(str(ROOT / "vendor_manifests"))
    info = read_stamp(data, ms, ".sm120-vendor.json")  # never raises: a bad stamp is a finding
    assert isinstance(info.problems, list)
    json.dumps(info.summary())
    try:
        doc = verifier.parse_stamp(data.decode("utf-8", "replace"))
    except verifier.VerifyError:
        return
    assert isinstance(verifier.validate(doc), list)


# ---------------------------------------------------------------- archives


def _zip_seed() -> bytes:
    from vendor_helpers import PREFIX, V2

    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        for rel, data in V2.items():
            z.writestr(f"{PREFIX}/{rel}", data)
        z.writestr("pkg-1.0.data/purelib/x.py", b"x")
        z.writestr("pkg-1.0.dist-info/RECORD", b"")
    return buf.getvalue()


def _tar_seed() -> bytes:
    from vendor_helpers import PREFIX, V2

    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as t:
        for rel, data in V2.items():
            info = tarfile.TarInfo(f"pkg-1.0/{PREFIX}/{rel}")
            info.size = len(data)
            t.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def _read_archive(data: bytes, label: str) -> None:
    from vendorkit.archive import ArchiveFork

    view = ArchiveFork(io.BytesIO(data), label)
    listing, _ = view.list_under("")
    for f in listing.values():
        if f.kind in ("file", "symlink") and not f.too_large:
            _typed(view.digest_of, f)
            _typed(view.read, f, 1 << 20)
    view.findings("")


@FUZZ
@given(data=mutated(_zip_seed()))
def test_fuzz_wheel(data):
    _typed(_read_archive, data, "fuzz-1.0-py3-none-any.whl")


@FUZZ
@given(data=mutated(_tar_seed()))
def test_fuzz_sdist(data):
    _typed(_read_archive, data, "fuzz-1.0.tar.gz")


# ---------------------------------------------------------------- index pages


class _Raw:
    def __init__(self, data: bytes):
        self._data = io.BytesIO(data)

    def read1(self, n, decode_content=False):
        return self._data.read(n)


class _Resp:
    def __init__(self, data: bytes, ctype: str):
        from requests.structures import CaseInsensitiveDict

        self.status_code, self.url, self.raw = 200, "https://index.example/simple/pkg/", _Raw(data)
        self.headers = CaseInsensitiveDict({"Content-Type": ctype})

    def close(self):
        pass


class _Session:
    def __init__(self, data: bytes, ctype: str):
        self.data, self.ctype = data, ctype

    def request(self, *a, **kw):
        return _Resp(self.data, self.ctype)


SEED_JSON = json.dumps(
    {
        "meta": {"api-version": "1.1"},
        "name": "pkg",
        "files": [
            {
                "filename": "pkg-1.0-py3-none-any.whl",
                "url": "../../files/pkg-1.0-py3-none-any.whl",
                "hashes": {"sha256": "0" * 64},
                "yanked": False,
            },
            {"filename": "pkg-1.1.tar.gz", "url": "https://files.example/pkg-1.1.tar.gz", "hashes": {}},
        ],
    }
).encode()
SEED_HTML = (
    b'<!DOCTYPE html><html><body><a href="../../files/pkg-1.0-py3-none-any.whl#sha256='
    + b"0" * 64
    + b'" data-yanked>pkg-1.0-py3-none-any.whl</a><br/><a href="/x/pkg-1.1.tar.gz">pkg-1.1.tar.gz</a>'
    b"</body></html>"
)


@FUZZ
@given(data=mutated(SEED_JSON), html=mutated(SEED_HTML))
def test_fuzz_index_pages(data, html):
    from vendorkit import pypi

    for body, ctype in ((data, "application/vnd.pypi.simple.v1+json"), (html, "text/html; charset=utf-8")):
        files = _typed(pypi.project_files, "pkg", "https://index.example/simple", _Session(body, ctype))
        for d in files or []:
            assert d.url.startswith(("http://", "https://")) and d.platforms
        _typed(pypi.release, "pkg", None, "https://index.example/simple", _Session(body, ctype))


# ---------------------------------------------------------------- git object databases


@pytest.fixture(scope="module")
def git_seed(tmp_path_factory) -> Path:
    from vendor_helpers import PREFIX, V2, commit_all, git, init_repo, write_tree

    repo = init_repo(tmp_path_factory.mktemp("gitseed") / "repo")
    write_tree(repo, {f"{PREFIX}/{k}": v for k, v in V2.items()})
    commit_all(repo, "one")
    write_tree(repo, {f"{PREFIX}/{k}": v + b"// two\n" for k, v in V2.items()})
    (repo / ".gitattributes").write_text("*.cuh text eol=crlf\n")
    commit_all(repo, "two")
    git(repo, "tag", "-a", "v1", "-m", "tag")
    git(repo, "gc", "-q")
    write_tree(repo, {f"{PREFIX}/loose.cuh": b"// loose\n"})
    commit_all(repo, "three")
    return repo


def _git_files(repo: Path) -> list[Path]:
    g = repo / ".git"
    return sorted(
        p
        for p in g.rglob("*")
        if p.is_file()
        and (p.suffix in (".pack", ".idx") or "objects/" in str(p) or p.name in ("packed-refs", "HEAD", "main"))
    )


@FUZZ
@given(pick=st.integers(0, 10_000), seed=st.data())
def test_fuzz_git_objects(git_seed, tmp_path_factory, pick, seed):
    from vendorkit.gitref import GitRefFork

    repo = tmp_path_factory.mktemp("g") / "repo"
    shutil.copytree(git_seed, repo)
    files = _git_files(repo)
    target = files[pick % len(files)]
    target.chmod(0o644)
    target.write_bytes(seed.draw(mutated(target.read_bytes())))

    def read_all():
        for ref in ("main", "v1", "HEAD"):
            view = GitRefFork(str(repo), ref)
            listing, _ = view.list_under("")
            for f in listing.values():
                if f.kind in ("file", "symlink") and not f.too_large:
                    view.digest_of(f)
            view.findings("")

    _typed(read_all)


# ---------------------------------------------------------------- the diff


@FUZZ
@given(
    a=st.lists(st.sampled_from(["a\n", "b\n", "\n", "}\n"]), max_size=60),
    b=st.lists(st.sampled_from(["a\n", "b\n", "\n", "c\n"]), max_size=60),
)
def test_fuzz_diff_is_an_edit_script(a, b):
    from vendorkit import diagnose

    ops = diagnose._opcodes(a, b)
    rebuilt, i = [], 0
    for tag, i1, i2, j1, j2 in ops:
        assert i1 == i
        if tag == "equal":
            assert a[i1:i2] == b[j1:j2]
        rebuilt += b[j1:j2]
        i = i2
    assert i == len(a) and rebuilt == b


# ---------------------------------------------------------------- pip's choice: no environment escapes it
_ARCHES = ("x86_64", "aarch64", "riscv64")
_TAG = st.one_of(
    st.builds(lambda a, b, arch: f"manylinux_{a}_{b}_{arch}", st.just(2), st.integers(0, 60), st.sampled_from(_ARCHES)),
    st.builds(lambda b, arch: f"musllinux_1_{b}_{arch}", st.integers(0, 4), st.sampled_from(_ARCHES)),
    st.builds(
        lambda a, b, arch: f"macosx_{a}_{b}_{arch}",
        st.integers(10, 20),
        st.integers(0, 15),
        st.sampled_from(("x86_64", "arm64", "universal2", "intel")),
    ),
    st.sampled_from(("win_amd64", "win32", "win_arm64", "linux_x86_64", "any", "ios_13_0_arm64_iphoneos")),
)
_PY = st.one_of(
    st.builds(lambda m: f"cp3{m}-cp3{m}", st.integers(5, 30)),
    st.builds(lambda m: f"cp3{m}-abi3", st.integers(2, 30)),
    st.builds(lambda m: f"py3{m}-none", st.integers(0, 30)),
    st.just("py3-none"),
)
_SPEC = st.one_of(
    st.none(), st.builds(lambda op, m: f"{op}3.{m}", st.sampled_from((">=", "<", "!=", "==", "<=")), st.integers(0, 30))
)
_FILE = st.tuples(st.integers(0, 6), st.booleans(), _PY, _TAG, _SPEC, st.booleans())
_REAL_ENV = st.tuples(
    st.integers(0, 40),
    st.booleans(),
    st.one_of(
        st.builds(lambda arch, b: f"linux-{arch} glibc2.{b}", st.sampled_from(_ARCHES), st.integers(0, 70)),
        st.builds(lambda arch, b: f"linux-{arch} musl1.{b}", st.sampled_from(_ARCHES), st.integers(0, 6)),
        st.builds(
            lambda arch, a, b: f"macos-{arch} {a}.{b}",
            st.sampled_from(("x86_64", "arm64")),
            st.integers(10, 25),
            st.integers(0, 15),
        ),
        st.sampled_from(("win-amd64", "win32", "win-arm64", "tag ios_13_0_arm64_iphoneos")),
    ),
)


@FUZZ
@given(files=st.lists(_FILE, min_size=1, max_size=8), env=_REAL_ENV)
def test_no_environment_installs_a_version_the_check_skips(files, env):
    """Whatever CPython and platform a user has (any minor, glibc, musl or macOS level, architecture), the
    version pip installs there (by the same compatibility rules) is among the versions the check reads: the
    environments it takes pip's choice in stand for all of them."""
    from types import SimpleNamespace

    from vendorkit import pip_select as ps

    dists = [
        SimpleNamespace(filename=f"pkg-{v}.0{'rc1' if pre else ''}-{py}-{tag}.whl", yanked=yanked, requires_python=spec)
        for v, pre, py, tag, spec, yanked in files
    ]
    minor, threaded, platform = env
    threaded = threaded and minor >= 13
    infos = [(d, ps.parse_filename(d.filename, "pkg")) for d in dists]
    cands = [(d, i) for d, i in infos if ps.compatible(i, d.requires_python, minor, threaded, platform)]
    if not cands:
        return
    assert ps._best(cands, None) in ps.choose(dists, "pkg", None).versions
