"""python -m tools.gentables [SOURCE]: regenerate amdrv/autogen from a linux-source-6.1 tree or tarball."""
import sys
import time

from tools.gentables import AUTOGEN_DIR, generate_all, open_tree


def main(argv: list[str]) -> int:
    t0 = time.monotonic()
    tree = open_tree(argv[0] if argv else None)
    paths = generate_all(tree, AUTOGEN_DIR)
    total = sum(p.stat().st_size for p in paths)
    print(f"gentables: wrote {len(paths)} modules ({total / 1024:.0f} KiB) from {tree.origin} "
          f"in {time.monotonic() - t0:.1f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
