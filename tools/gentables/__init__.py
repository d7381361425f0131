"""Generator of amdrv/autogen: turns the upstream amdgpu headers into committed Python tables.

Run by hand when the tables change (`python -m tools.gentables`), never at install time.
"""
from pathlib import Path

from tools.gentables import regs, structs
from tools.gentables.source import HeaderTree, open_tree

AUTOGEN_DIR = Path(__file__).resolve().parents[2] / "amdrv" / "autogen"


def generate_all(tree: HeaderTree, outdir: Path) -> list[Path]:
    """Writes every generated module into outdir and returns their paths."""
    outdir.mkdir(parents=True, exist_ok=True)
    return regs.generate(tree, outdir) + structs.generate(tree, outdir)


__all__ = ["AUTOGEN_DIR", "HeaderTree", "generate_all", "open_tree"]
