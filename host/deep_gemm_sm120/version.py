"""The package version, in one place: setup.py reads it from this file, and a test holds it to the latest
release manifest (vendor_manifests/vX.Y.Z.yaml): a release bumps both."""

__version__ = "0.8.17"
