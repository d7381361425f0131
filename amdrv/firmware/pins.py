"""Pins of every firmware file the Navi31 and Navi33 boot paths load: linux-firmware tag 20230210.

Sizes and sha256 are those of the files at that tag (identical to Debian's firmware-amd-graphics
20230210-5, whose changelog records no amdgpu change against upstream). Which files a chip needs follows
from its IP versions, as in upstream amdgpu's MODULE_FIRMWARE lists.
"""
from dataclasses import dataclass

from amdrv.chips import SUPPORTED, Chip

TAG = "20230210"
# Raw-file URLs of linux-firmware at the pinned tag, tried in order; {name} is the path under amdgpu/.
DEFAULT_URLS = (
    "https://git.kernel.org/pub/scm/linux/kernel/git/firmware/linux-firmware.git/plain/amdgpu/{name}?h=" + TAG,
    "https://gitlab.com/kernel-firmware/linux-firmware/-/raw/" + TAG + "/amdgpu/{name}",
)


@dataclass(frozen=True)
class Pin:
    name: str
    size: int
    sha256: str
    purpose: str


_PURPOSE = {
    "sos": "PSP bootloader components (sys_drv, SOS, TOC, ...)", "ta": "PSP trusted applications",
    "smu": "SMU (MP1) power management firmware", "sdma": "SDMA copy engine",
    "pfp": "CP prefetch parser (RS64)", "me": "CP micro engine (RS64)", "mec": "CP compute micro engine (RS64)",
    "mes": "MES scheduler (pipe 0)", "mes1": "MES KIQ (pipe 1)", "imu": "IMU (GFX power-up)", "rlc": "RLC",
}

_TABLE = """
psp_13_0_0_sos.bin 268304 0e585dd67c1c1a36076263b9d4f64033684af47005a90b7f34eb355fcfdcdfcf
psp_13_0_0_ta.bin 234752 7357ea1b780dbe87e4f349e16b7285fd5a2954fa3c194cd72cdf7d25e901c855
smu_13_0_0.bin 292452 892728fc9bbadde27637dc578730b0069f9d15ea00b74dfcbf84defc0caef5db
sdma_6_0_0.bin 34560 6c0ee334cb4b71debe65eadd0da2537fab378fc552b736b53afe872703b5d414
gc_11_0_0_pfp.bin 207712 ef275f109937ee696e893729afbc396f441697c98d99fa6b97e8930faf48f82b
gc_11_0_0_me.bin 189392 df95b30c03f1725332655036c2800e5471b76467c50093ab52d5bface1dcf1ec
gc_11_0_0_mec.bin 407072 74daa9af1046e4b4d7f902ecfd2397d2eb94c6f20be38969d62eefe0340665a7
gc_11_0_0_mes.bin 286336 3b30fd16d1a0df5006afab78d1117ad6b3b2bdc9c01712070ece20648d362dec
gc_11_0_0_mes1.bin 230624 74d28d4e639513314a37177426bf31253708a00793bf5b456fe9d133384a1bcc
gc_11_0_0_imu.bin 132352 2a5fd2c6f59b058b855998586640ac806b4c554bab9fb1b1978b1f8e60ed64e2
gc_11_0_0_rlc.bin 184992 cd0e4f5b5aa9458231b33c78adcb5bfb42014c14583e12639581c62b9074d06f
psp_13_0_7_sos.bin 248496 ec293cd16f51bcc8728111e86b348b00843cd1907d9430f1f95c09898c01cbcb
psp_13_0_7_ta.bin 209920 08a1455270f907390b7746c2593bd8e7cbc365c525dbc4410b0b4378ffc298a4
smu_13_0_7.bin 287080 765fea4989675e619747cf3c6da9a53cb879f83ec73a1bf29e5d703c58fb23c6
sdma_6_0_2.bin 34560 12eb0c1611bc93c1b57e1aaf37a1794bd41c176f21660a462821af6cf619e82a
gc_11_0_2_pfp.bin 207712 4b3f3dd404f3c4a55e39f4ca759cd55343ce1d0105fa705f383a29dc265813ea
gc_11_0_2_me.bin 189408 5af1eabb16ec6e65d5e61abb399fdde3ec751cde02af1bce9743428bac957c10
gc_11_0_2_mec.bin 407072 d791f3469d3da8bb94bee9e8a9670f3ab7d51bb52c3e9fa262d022669198b232
gc_11_0_2_mes.bin 286336 e41e0a0a950f55f1bf8fa260972e67e9e06ba1fdf06125dcea46b92dd1d57276
gc_11_0_2_mes1.bin 230912 e1da52476f0a4172fbdd729a6e5aef966e73b875f7a831cebc6007361e415f35
gc_11_0_2_imu.bin 132352 88dba4a22c77109af8b7bb75d7a73c948549db38faa358feb8f85098a688ca2a
gc_11_0_2_rlc.bin 178448 c7f3b354d67d131c21455cb22f56ac1dc7d8c06fad436b4dc57841147ae9f7bc
"""


def _kind(name: str) -> str:
    stem = name.removesuffix(".bin")
    if stem.startswith(("smu_", "sdma_")):
        return stem.split("_")[0]
    return stem.rsplit("_", 1)[1]


PINS: dict[str, Pin] = {}
for _name, _size, _sha in (ln.split() for ln in _TABLE.strip().splitlines()):
    PINS[_name] = Pin(_name, int(_size), _sha, _PURPOSE[_kind(_name)])


def files_for(chip: Chip) -> list[str]:
    """The firmware files a chip's boot loads, named from its IP versions as upstream names them."""
    gc, mp0, mp1, sdma = (chip.ip_tag(b) for b in ("gc", "mp0", "mp1", "sdma"))
    return ([f"psp_{mp0}_sos.bin", f"psp_{mp0}_ta.bin", f"smu_{mp1}.bin", f"sdma_{sdma}.bin"]
            + [f"gc_{gc}_{part}.bin" for part in ("pfp", "me", "mec", "mes", "mes1", "imu", "rlc")])


def _check_complete() -> None:
    # A chip whose IP versions name a file we have no pin for is a bug in this table, caught at import.
    for chip in SUPPORTED:
        missing = [n for n in files_for(chip) if n not in PINS]
        assert not missing, f"firmware pins lack {missing} needed by {chip.name}"


_check_complete()
