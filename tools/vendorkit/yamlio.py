"""PyYAML access: safe loading only, with the C loader when the wheel has it (10x faster)."""
from __future__ import annotations

from typing import Any

from .errors import UsageError

try:
    import yaml
except ImportError:  # pragma: no cover - exercised through a subprocess test
    yaml = None

PYYAML_MISSING = (
    "check_vendor needs PyYAML: install it with `python -m pip install pyyaml` and run again"
)


def require_yaml() -> Any:
    if yaml is None:
        raise UsageError(PYYAML_MISSING)
    return yaml


def safe_load(text: str) -> Any:
    y = require_yaml()
    loader = getattr(y, "CSafeLoader", y.SafeLoader)
    return y.load(text, Loader=loader)  # noqa: S506 - SafeLoader / CSafeLoader only


def yaml_error_types() -> tuple[type[BaseException], ...]:
    return (require_yaml().YAMLError,)
