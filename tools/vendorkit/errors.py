"""Typed failures that map onto check_vendor's documented exit codes."""

from __future__ import annotations

EXIT_OK = 0
EXIT_DRIFT = 1
EXIT_CANNOT_CHECK = 2
EXIT_USAGE = 3


class VendorError(Exception):
    """Base class: carries the exit code the CLI returns for it."""

    exit_code = EXIT_USAGE


class UsageError(VendorError):
    """Bad arguments, unknown tag, ambiguous prefix, refused release (exit 3)."""

    exit_code = EXIT_USAGE


class ManifestError(VendorError):
    """A manifest that is malformed or unsafe (exit 3)."""

    exit_code = EXIT_USAGE


class CannotCheck(VendorError):
    """I/O, permission, network, rate-limit or truncation problems (exit 2)."""

    exit_code = EXIT_CANNOT_CHECK
