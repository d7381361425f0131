"""Every code block in docs/ runs as written (issue 12: a reader copies them first).

The fence's info string says what a block is, and this test holds each kind:
- `python`: run. The python blocks of one page run in order in one namespace, in a fresh process per page
  (the simulator's bus is per process, as a reader's would be), with the page's own line numbers in a
  traceback: a failure names the file and the line.
- `sh`, `bash`: run with bash (`-e`), `python` being this interpreter, in a scratch directory.
- `toml`: parsed; its tables must be those of pyproject.toml.
- `text`: output or a file listing, shown as is (nothing to run).
- `console`: a command that cannot run here (real hardware, root, runs of many minutes). The line before
  the fence must say so, visibly: `*Not run by the docs test: <why>.*`
A fence with no info string, or another one, fails: say what the block is.
"""
import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = sorted((ROOT / "docs").glob("*.md"))
KINDS = {"python", "sh", "bash", "toml", "text", "console"}
NOT_RUN_NOTE = re.compile(r"^\*Not run by the docs test: .+\.\*$", re.S)


def blocks(doc: Path) -> list[tuple[int, str, str]]:
    """[(line of the opening fence, info string, code)] of a markdown page."""
    out, lines, i = [], doc.read_text().splitlines(), 0
    while i < len(lines):
        m = re.match(r"^```(.*)$", lines[i])
        if m:
            start, body = i + 1, []
            i += 1
            while i < len(lines) and lines[i] != "```":
                body.append(lines[i])
                i += 1
            if i == len(lines):
                raise AssertionError(f"{doc.relative_to(ROOT)}:{start}: code fence never closed")
            out.append((start, m.group(1).strip(), "\n".join(body) + "\n"))
        i += 1
    return out


def paragraph_before(lines: list[str], line: int) -> str:
    """The paragraph just above the fence at 1-based `line`, joined into one line."""
    i = line - 2
    while i >= 0 and not lines[i].strip():
        i -= 1
    para = []
    while i >= 0 and lines[i].strip():
        para.insert(0, lines[i].strip())
        i -= 1
    return " ".join(para)


def where(doc: Path, line: int) -> str:
    return f"{doc.relative_to(ROOT)}:{line}"


@pytest.mark.parametrize("doc", DOCS, ids=lambda d: d.name)
def test_every_block_says_what_it_is(doc):
    lines = doc.read_text().splitlines()
    bad = []
    for line, info, _ in blocks(doc):
        if info not in KINDS:
            bad.append(f"{where(doc, line)}: fence info {info!r}: use one of {sorted(KINDS)}")
        elif info == "console":
            before = paragraph_before(lines, line)
            if not NOT_RUN_NOTE.match(before):
                bad.append(f"{where(doc, line)}: a console block needs the paragraph '*Not run by the docs test: "
                           f"<why>.*' just before it (found {before!r})")
    assert not bad, "\n".join(bad)


# What a page's blocks need beyond the package, and what must hold after them (appended to the last block).
NEEDS = {
    "hcq.md": ("clang",),
    "isa.md": ("clang",),
    "nv.md": ("nv",),
}
AFTER = {
    "compiler.md": "assert np.allclose(y.numpy().sum(-1), 1, atol=1e-5)\n",
    "hcq.md": "assert np.array_equal(y, 2 * x), y[:8]\n",
    "nv.md": "assert 'nv:sim: GH100 sm_90' in str(dev), str(dev)\n",
    "isa.md": "assert np.array_equal(out, 2 * a), out[:8]\n",
}
SAVED = {"simulator.md": "gpu.state"}   # a file the page says its process leaves behind (saved at exit)
ENV = {"compiler.md": {"DEVICE": "am:sim"}}   # the page's "$DEVICE, else ...": the simulator here
# The process running a page: each block compiled with the page's line numbers, run in one namespace.
HARNESS = """
import sys
ns = {"__name__": "__main__"}
for path, line, code in BLOCKS:
    exec(compile("\\n" * line + code, path, "exec"), ns)
"""


def need(what: str):
    if what == "clang" and not (shutil.which("clang-15") and shutil.which("ld.lld-15")):
        pytest.skip("clang-15 and ld.lld-15 are needed (make test installs them)")
    if what == "nv":
        import hcq
        from nvdrv import nvrtc
        if "nv" not in hcq.backends() or not nvrtc.available():
            pytest.skip("needs the nv entry points (pip install -e .) and NVRTC (nvidia-cuda-nvrtc-cu12)")


def env(debian_firmware: Path) -> dict:
    bindir = Path(sys.executable).parent
    return {**os.environ, "PYTHONPATH": str(ROOT), "DRIVERLESS_FIRMWARE_DIR": str(debian_firmware),
            "PATH": f"{bindir}{os.pathsep}{os.environ.get('PATH', '')}"}


PY_DOCS = [d for d in DOCS if any(info == "python" for _, info, _ in blocks(d))]


@pytest.mark.parametrize("doc", PY_DOCS, ids=lambda d: d.name)
def test_python_blocks_run(doc, tmp_path, debian_firmware):
    for what in NEEDS.get(doc.name, ()):
        need(what)
    todo = [(str(doc.relative_to(ROOT)), line, code) for line, info, code in blocks(doc) if info == "python"]
    if doc.name in AFTER:
        todo.append((f"{doc.relative_to(ROOT)} (checks after the blocks)", 0, AFTER[doc.name]))
    r = subprocess.run([sys.executable, "-c", f"BLOCKS = {todo!r}\n" + HARNESS], cwd=tmp_path, capture_output=True,
                       text=True, timeout=110, env={**env(debian_firmware), **ENV.get(doc.name, {})})
    assert r.returncode == 0, f"a python block of {doc.relative_to(ROOT)} failed:\n{r.stderr[-4000:]}"
    if doc.name in SAVED:
        assert (tmp_path / SAVED[doc.name]).is_file(), f"{doc.relative_to(ROOT)}: no {SAVED[doc.name]} after the run"


SH_BLOCKS = [(d, line, code) for d in DOCS for line, info, code in blocks(d) if info in ("sh", "bash")]


@pytest.mark.parametrize("doc,line,code", SH_BLOCKS, ids=[f"{d.name}:{n}" for d, n, _ in SH_BLOCKS])
def test_shell_blocks_run(doc, line, code, tmp_path, debian_firmware):
    r = subprocess.run(["bash", "-e", "-o", "pipefail", "-c", code], cwd=tmp_path, capture_output=True, text=True,
                       timeout=110, env=env(debian_firmware))
    assert r.returncode == 0, f"the shell block at {where(doc, line)} failed ({r.returncode}):\n{r.stdout[-2000:]}" \
                              f"\n{r.stderr[-4000:]}"


def test_toml_blocks_are_pyproject():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())

    def contained(part, whole, path):
        for k, v in part.items():
            assert k in whole, f"{path}{k} is not in pyproject.toml"
            if isinstance(v, dict):
                contained(v, whole[k], f"{path}{k}.")
            else:
                assert whole[k] == v, f"{path}{k} = {v!r}, pyproject.toml has {whole[k]!r}"

    for doc in DOCS:
        for line, info, code in blocks(doc):
            if info == "toml":
                try:
                    contained(tomllib.loads(code), project, "")
                except (AssertionError, tomllib.TOMLDecodeError) as e:
                    raise AssertionError(f"{where(doc, line)}: {e}") from None


def test_environment_md_lists_every_variable_read():
    # Every os.environ/getenv name in the packages (and the test config) has a row in docs/environment.md.
    doc = (ROOT / "docs" / "environment.md").read_text()
    pat = re.compile(r"""(?:environ\.get\(|environ\[|getenv\()\s*["']([A-Z_][A-Z0-9_]*)["']""")
    const = re.compile(r"""^\s*[A-Z_]*ENV[A-Z_]*\s*=\s*["']([A-Z_][A-Z0-9_]*)["']""", re.M)
    ours = re.compile(r"""["'](DRIVERLESS_[A-Z0-9_]+)["']""")   # any of our names, however it is read
    names = set()
    for pkg in ("amdrv", "compiler_bridge", "hcq", "nvdrv", "pcie", "gpusim", "tools", "bench", "driverless"):
        for f in (ROOT / pkg).rglob("*.py"):
            text = f.read_text()
            names |= set(pat.findall(text)) | set(const.findall(text)) | set(ours.findall(text))
    names |= set(pat.findall((ROOT / "tests" / "conftest.py").read_text()))
    assert {"DEVICE", "DRIVERLESS_CACHE", "DRIVERLESS_COLD_BOOT", "DRIVERLESS_FIRMWARE_DIR"} <= names
    missing = sorted(n for n in names if f"`{n}`" not in doc)
    assert not missing, f"docs/environment.md lacks {missing}"
