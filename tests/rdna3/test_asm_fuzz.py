"""Random machine words of every table entry, decoded by us and by llvm-mc-15: where LLVM prints an
instruction, we print the same text; where LLVM marks an operand invalid, we refuse the word."""
import random
import re
import shutil

import pytest

from rdna3 import decode
from rdna3.encoding import FORMATS
from rdna3.errors import DecodeError
from rdna3.opcodes_gfx11 import OPCODES
from tools.gen_isa import encode, mc_disassemble

pytestmark = pytest.mark.skipif(shutil.which("llvm-mc-15") is None, reason="llvm-mc-15 not installed")



def random_words(seed: int, n: int) -> list[bytes]:
    rnd = random.Random(seed)
    kinds = sorted(OPCODES)
    out = []
    for _ in range(n):
        kind = rnd.choice(kinds)
        op = rnd.choice(sorted(OPCODES[kind]))
        fmt = ("VOPD" if kind.startswith("VOPD") else "FLAT" if kind.split("_")[0] in ("FLAT", "GLOBAL", "SCRATCH")
               else "MUBUF" if kind.startswith("MUBUF") else kind)
        layout = FORMATS[fmt][2]
        f = {k: rnd.getrandbits(w) for k, (lo, w) in layout.items()}
        for k, (lo, w) in layout.items():
            if k.startswith(("src", "ssrc")):   # every kind of source: SGPR, special, constant, VGPR, literal
                f[k] = rnd.choice([rnd.randrange(0, 106), rnd.randrange(106, 128), rnd.randrange(128, 256),
                                   rnd.randrange(256, 512) if w == 9 else 1, 255])
        if fmt == "VOPD":
            f["opx" if kind == "VOPDX" else "opy"] = op
        else:
            f["op"] = op
        if fmt == "MUBUF":
            f.update(idxen=int("idxen" in kind), offen=int("offen" in kind), glc=int(kind.endswith("glc")))
        if fmt == "FLAT":
            f["seg"] = {"FLAT": 0, "SCRATCH": 1, "GLOBAL": 2}[kind.split("_")[0]]
        out.append(encode(fmt, f) + rnd.getrandbits(32).to_bytes(4, "little"))
    return out


def test_random_words_decode_like_llvm():
    words = random_words(2026, 4000)
    agree, bad = 0, []
    for word, ref in zip(words, mc_disassemble(words)):
        if ref is None:
            continue
        ref = " ".join(ref.split())
        try:
            mine = str(decode(word))
        except DecodeError as e:
            mine = f"DecodeError: {e}"
        # LLVM prints an operand it cannot encode as /*invalid immediate*/; we refuse such words
        # (s_delay_alu's "/* invalid instid value */" is printed, as LLVM does)
        if re.search(r"/\*\s*[Ii]nvalid (immediate|dpp_ctrl)", ref):
            if not mine.startswith("DecodeError"):
                bad.append((word.hex(), ref, mine))
            continue
        if mine == ref:
            agree += 1
        else:
            bad.append((word.hex(), ref, mine))
    assert not bad, f"{len(bad)} words differ from llvm-mc-15:\n" + "\n".join(map(str, bad[:12]))
    assert agree > 2000
