"""PyYAML access: safe loading only, with the C loader when the wheel has it. Imported lazily: the manifests we
write are read by a strict stdlib reader first, so most runs never load PyYAML."""

from __future__ import annotations

from typing import Any

from .errors import UsageError

PYYAML_MISSING = "check_vendor needs PyYAML: install it with `python -m pip install pyyaml` and run again"
_yaml: Any = None


def available() -> bool:
    return _module() is not None


def _module():
    global _yaml
    if _yaml is None:
        try:
            import yaml
        except ImportError:  # pragma: no cover - exercised through a subprocess test
            return None
        _yaml = yaml
    return _yaml


def require_yaml() -> Any:
    y = _module()
    if y is None:
        raise UsageError(PYYAML_MISSING)
    return y


def safe_load(text: str) -> Any:
    """The document, through PyYAML's pure-Python safe loader: libyaml's C loader overflows its stack (a
    segfault, no exception) on deeply nested input, the Python one raises RecursionError, reported as a YAML
    error like any other."""
    y = require_yaml()
    try:
        return y.load(text, Loader=y.SafeLoader)
    except RecursionError:
        raise y.YAMLError("nested too deeply") from None
    except (ValueError, TypeError, OverflowError) as e:  # constructors on crafted scalars (a 5,000-digit int)
        raise y.YAMLError(f"{type(e).__name__}: {e}") from None


def yaml_error_types() -> tuple[type[BaseException], ...]:
    return (require_yaml().YAMLError,)
