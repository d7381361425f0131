"""The committed amdrv/autogen must be exactly what the generator makes from the headers."""
import filecmp

import pytest

from tools.gentables import AUTOGEN_DIR, generate_all


@pytest.fixture(scope="module")
def tree(kernel_tree):
    if kernel_tree is None:
        pytest.skip("no linux-source-6.1 (install Debian's linux-source-6.1 or set LINUX_SRC)")
    return kernel_tree


def test_committed_tables_are_fresh(tree, tmp_path):
    written = generate_all(tree, tmp_path)
    assert written, "generator wrote nothing"
    stale = [p.name for p in written if not filecmp.cmp(p, AUTOGEN_DIR / p.name, shallow=False)
             if (AUTOGEN_DIR / p.name).exists()]
    missing = [p.name for p in written if not (AUTOGEN_DIR / p.name).exists()]
    generated = {p.name for p in written} | {"__init__.py"}
    orphans = sorted(p.name for p in AUTOGEN_DIR.glob("*.py") if p.name not in generated)
    assert not (stale or missing or orphans), (
        f"amdrv/autogen is stale (run `python -m tools.gentables`): stale={stale} missing={missing} "
        f"orphans={orphans}")
