"""Library behind tools/check_vendor.py: manifests, fork views, comparison, sync, release.

Runs from a plain checkout with the standard library only (PyYAML is used when installed; requests for remote forks).
"""
