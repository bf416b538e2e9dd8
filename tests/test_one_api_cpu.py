"""One API: `deep_gemm_sm120.X` and `import deep_gemm`'s `X` are one object, every name is declared once (an
alias is its target's object and no API module assigns it again), and the signature each op declares for the
support matrix is the one its function has. CPU only: importing the package never initializes CUDA."""

from __future__ import annotations

import ast
import importlib
import inspect
import re

import pytest

import deep_gemm_sm120 as dg
from deep_gemm_sm120 import compat
from deep_gemm_sm120.core.names import Op
from deep_gemm_sm120.core.registry import registry


def _declarations():
    reg = registry()
    return [(fam, decl) for fam in reg.user_families for decl in fam.names]


def test_every_shared_name_is_one_object():
    shared = 0
    for _, decl in _declarations():
        ours = dg.NAMES[decl.name]
        if decl.deepgemm:
            assert getattr(compat, decl.name) is ours, f"deep_gemm.{decl.name} is not deep_gemm_sm120's object"
            shared += 1
        else:
            assert not hasattr(compat, decl.name), f"{decl.name} is ours only, yet deep_gemm has it"
        if not registry().resolve(decl.name)[1].refused:
            assert getattr(dg, decl.name) is ours, f"deep_gemm_sm120.{decl.name} is not the bound object"
    assert shared >= 40  # the DeepGEMM surface vLLM and SGLang load: a vanished registry would pass vacuously


def test_an_alias_is_its_targets_object():
    aliases = [(fam, d) for fam, d in _declarations() if d.alias_of]
    assert aliases
    for _, decl in aliases:
        assert dg.NAMES[decl.name] is dg.NAMES[decl.alias_of], decl.name


def _module_level_names(path: str) -> set[str]:
    tree = ast.parse(open(path, encoding="utf-8").read())
    names = set()
    for node in tree.body:
        if isinstance(node, ast.Assign):
            names |= {t.id for t in node.targets if isinstance(t, ast.Name)}
        elif isinstance(node, (ast.AnnAssign, ast.AugAssign)) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
        elif isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            names.add(node.name)
    return names


def test_no_api_module_defines_an_alias_again():
    """An alias is declared once, in the family's names; an API module that also binds it would be a second
    declaration that can drift from the first."""
    reg = registry()
    for fam in reg.user_families:
        defined = set()
        for mod in fam.api_modules:
            defined |= _module_level_names(importlib.import_module(f"{reg.packages[fam.name]}.{mod}").__file__)
        again = sorted(d.name for d in fam.names if d.alias_of and d.name in defined)
        assert not again, f"{fam.name}: API modules bind the aliases {again} the declaration already names"


def _shown(fn) -> str:
    """A function's signature as the support matrix writes it: names, defaults as repr, `*` and `/`, no
    annotations."""
    parts, star = [], False
    params = list(inspect.signature(fn).parameters.values())
    for i, p in enumerate(params):
        if p.kind is p.KEYWORD_ONLY and not star:
            parts.append("*")
            star = True
        text = {p.VAR_POSITIONAL: f"*{p.name}", p.VAR_KEYWORD: f"**{p.name}"}.get(p.kind, p.name)
        star = star or p.kind is p.VAR_POSITIONAL
        if p.default is not p.empty:
            text += f"={p.default!r}"
        parts.append(text)
        if p.kind is p.POSITIONAL_ONLY and (i + 1 == len(params) or params[i + 1].kind is not p.POSITIONAL_ONLY):
            parts.append("/")
    return f"({', '.join(parts)})"


def _ops():
    return [(fam.name, d) for fam, d in _declarations() if isinstance(d, Op) and d.signature]


@pytest.mark.parametrize("family,op", _ops(), ids=lambda x: getattr(x, "name", x))
def test_declared_signature_is_the_functions(family, op):
    name, _, rest = op.signature.partition("(")
    assert name == op.name, f"{family}: the signature of {op.name} names {name}"
    declared = re.sub(r"\s+", " ", "(" + rest).strip()
    assert _shown(dg.NAMES[op.name]) == declared, f"{family}.{op.name}"


def test_the_signature_check_sees_a_difference():
    def f(a, b, c=None, *, d=1):
        pass

    assert _shown(f) == "(a, b, c=None, *, d=1)"
    assert _shown(f) != "(a, b, c=None, d=1)"
