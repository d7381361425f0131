"""Bit layouts of the gfx11 (RDNA3) instruction formats, from AMD's "RDNA3 Instruction Set
Architecture" reference (chapter "Microcode Formats"), as checked against llvm-mc-15.

A layout maps a field name to (lowest bit, width) inside the little-endian 32- or 64-bit base word;
`ENC` is the fixed format-identifying field. The literal dword, when present, follows the base word.
"""

# name: (base size in bytes, encoding field (lo, width, value), {field: (lo, width)})
FORMATS = {
    "SOP2": (4, (30, 2, 0b10), {"ssrc0": (0, 8), "ssrc1": (8, 8), "sdst": (16, 7), "op": (23, 7)}),
    "SOPK": (4, (28, 4, 0b1011), {"simm16": (0, 16), "sdst": (16, 7), "op": (23, 5)}),
    "SOP1": (4, (23, 9, 0b101111101), {"ssrc0": (0, 8), "op": (8, 8), "sdst": (16, 7)}),
    "SOPC": (4, (23, 9, 0b101111110), {"ssrc0": (0, 8), "ssrc1": (8, 8), "op": (16, 7)}),
    "SOPP": (4, (23, 9, 0b101111111), {"simm16": (0, 16), "op": (16, 7)}),
    "SMEM": (8, (26, 6, 0b111101), {"sbase": (0, 6), "sdata": (6, 7), "dlc": (13, 1), "glc": (14, 1),
                                    "op": (18, 8), "offset": (32, 21), "soffset": (57, 7)}),
    "VOP1": (4, (25, 7, 0b0111111), {"src0": (0, 9), "op": (9, 8), "vdst": (17, 8)}),
    "VOPC": (4, (25, 7, 0b0111110), {"src0": (0, 9), "vsrc1": (9, 8), "op": (17, 8)}),
    "VOP2": (4, (31, 1, 0), {"src0": (0, 9), "vsrc1": (9, 8), "vdst": (17, 8), "op": (25, 6)}),
    "VOP3": (8, (26, 6, 0b110101), {"vdst": (0, 8), "abs": (8, 3), "op_sel": (11, 4), "clamp": (15, 1),
                                    "op": (16, 10), "src0": (32, 9), "src1": (41, 9), "src2": (50, 9),
                                    "omod": (59, 2), "neg": (61, 3)}),
    "VOP3SD": (8, (26, 6, 0b110101), {"vdst": (0, 8), "sdst": (8, 7), "clamp": (15, 1), "op": (16, 10),
                                      "src0": (32, 9), "src1": (41, 9), "src2": (50, 9), "omod": (59, 2),
                                      "neg": (61, 3)}),
    "VOP3P": (8, (24, 8, 0b11001100), {"vdst": (0, 8), "neg_hi": (8, 3), "op_sel": (11, 3),
                                       "op_sel_hi2": (14, 1), "clamp": (15, 1), "op": (16, 7),
                                       "src0": (32, 9), "src1": (41, 9), "src2": (50, 9),
                                       "op_sel_hi": (59, 2), "neg": (61, 3)}),
    "VOPD": (8, (26, 6, 0b110010), {"srcx0": (0, 9), "vsrcx1": (9, 8), "opy": (17, 5), "opx": (22, 4),
                                    "srcy0": (32, 9), "vsrcy1": (41, 8), "vdsty": (49, 7), "vdstx": (56, 8)}),
    "DS": (8, (26, 6, 0b110110), {"offset0": (0, 8), "offset1": (8, 8), "gds": (17, 1), "op": (18, 8),
                                  "addr": (32, 8), "data0": (40, 8), "data1": (48, 8), "vdst": (56, 8)}),
    # FLAT, GLOBAL and SCRATCH share one layout; `seg` tells them apart (0, 1 scratch, 2 global).
    "FLAT": (8, (26, 6, 0b110111), {"offset": (0, 13), "dlc": (13, 1), "glc": (14, 1), "slc": (15, 1),
                                    "seg": (16, 2), "op": (18, 7), "addr": (32, 8), "data": (40, 8),
                                    "saddr": (48, 7), "sve": (55, 1), "vdst": (56, 8)}),
    # MUBUF: buffer loads/stores/atomics through a 4-SGPR resource (srsrc holds its first SGPR / 4), and
    # the cache invalidations buffer_gl0_inv/buffer_gl1_inv that clang emits for acquire atomics.
    "MUBUF": (8, (26, 6, 0b111000), {"offset": (0, 12), "slc": (12, 1), "dlc": (13, 1), "glc": (14, 1),
                                     "op": (18, 8), "vaddr": (32, 8), "vdata": (40, 8), "srsrc": (48, 5),
                                     "tfe": (53, 1), "offen": (54, 1), "idxen": (55, 1), "soffset": (56, 8)}),
}
FLAT_SEGMENTS = {0: "FLAT", 1: "SCRATCH", 2: "GLOBAL"}

# Order in which a word is matched against the formats: longest fixed field first, so that e.g.
# SOP1 (9 bits 0b101111101) wins over SOPK (4 bits 0b1011) and VOP1/VOPC over VOP2 (1 bit).
MATCH_ORDER = sorted((f for f in FORMATS if f not in ("VOP3SD",)), key=lambda f: -FORMATS[f][1][1])

# 9-bit source operand codes (SSRC is the low 8 bits of the same space; VGPRs are 256 + n).
SGPR_MAX = 105
VCC_LO, VCC_HI = 106, 107
TTMP_BASE, TTMP_COUNT = 108, 16
M0, NULL, EXEC_LO, EXEC_HI = 125, 124, 126, 127
INT_ZERO, INT_POS_MAX, INT_NEG_MIN = 128, 192, 208   # 128 -> 0, 129..192 -> 1..64, 193..208 -> -1..-16
FLOAT_CODES = {240: 0.5, 241: -0.5, 242: 1.0, 243: -1.0, 244: 2.0, 245: -2.0, 246: 4.0, 247: -4.0}
INV_2PI = 248
LITERAL = 255
VGPR_BASE = 256
SPECIAL_SRC = {235: "src_shared_base", 236: "src_shared_limit", 237: "src_private_base",
               238: "src_private_limit", 239: "src_pops_exiting_wave_id", 251: "src_vccz",
               252: "src_execz", 253: "src_scc", 254: "src_lds_direct"}
SPECIAL_REG = {VCC_LO: "vcc_lo", VCC_HI: "vcc_hi", M0: "m0", NULL: "null", EXEC_LO: "exec_lo",
               EXEC_HI: "exec_hi"}
# 64-bit views of the special pairs, as LLVM names them.
SPECIAL_REG64 = {VCC_LO: "vcc", EXEC_LO: "exec"}

# Bits of each inline float constant at 16, 32 and 64 bits; 1/(2*pi) is code 248.
INV_2PI_BITS = {16: 0x3118, 32: 0x3E22F983, 64: 0x3FC45F306DC9C882}


def get_field(word: int, lo: int, width: int) -> int:
    return (word >> lo) & ((1 << width) - 1)


def put_field(word: int, lo: int, width: int, value: int, name: str = "") -> int:
    if value < 0 or value >= (1 << width):
        raise ValueError(f"field {name or lo} value {value} does not fit {width} bits")
    return word | (value << lo)


def format_of(word: int) -> str | None:
    """The format of a base word (VOP3 stands for VOP3 and VOP3SD; FLAT for FLAT/GLOBAL/SCRATCH)."""
    for f in MATCH_ORDER:
        lo, width, value = FORMATS[f][1]
        if get_field(word, lo, width) == value:
            return f
    return None

# s_waitcnt_depctr's counters: (name, lowest bit, width), in the order LLVM prints them. A counter at
# its all-ones value does not wait and is left out; bits 5 and 6 must be zero for the symbolic form.
DEPCTR_FIELDS = (("depctr_hold_cnt", 7, 1), ("depctr_sa_sdst", 0, 1), ("depctr_va_vdst", 12, 4),
                 ("depctr_va_sdst", 9, 3), ("depctr_va_ssrc", 8, 1), ("depctr_va_vcc", 1, 1),
                 ("depctr_vm_vsrc", 2, 3))
DEPCTR_RESERVED = 0x60
