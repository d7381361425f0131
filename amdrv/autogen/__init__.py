"""GENERATED tables from the upstream amdgpu headers (Debian linux-source-6.1).

Do not edit these modules by hand: change tools/gentables and run `python -m tools.gentables`.
tests/tools/test_gentables.py fails when they are stale.
"""
