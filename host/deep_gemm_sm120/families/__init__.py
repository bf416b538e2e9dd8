"""Kernel families, one package each: `<family>/__init__.py` declares the family (torch-free, read by the
compile gate too) and `<family>/api.py` holds its DeepGEMM-named PyTorch entry points. The registry
(core/registry.py) discovers the packages here; see docs/adding_a_family.md."""
