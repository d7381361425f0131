"""PSP 13.0.x (MP0): the bootloader, the KM ring and the firmware loads of a Navi31/Navi33 boot.

Upstream's front-door load (amdgpu_psp.c psp_load_fw/psp_hw_start/psp_load_non_psp_fw, psp_v13_0.c), which
`PSP.init()` follows:

1. Bootloader (skipped when the secure OS already runs: C2PMSG_81 non-zero, psp_v13_0_is_sos_alive): the sos
   package's KDB, then TOS_SPL_TABLE if the package has an SPL component (psp_hw_start) with the KDB staged
   again (psp_v13_0_bootloader_load_spl stages psp->kdb on MP0 13), SYS_DRV (then SOC/INTF/DBG/RAS drivers
   if the package has them) and SOS, each staged in
   a 1 MiB-aligned buffer whose MC address >> 20 goes to C2PMSG_36, the PSP_BL__LOAD_* command to C2PMSG_35;
   C2PMSG_35 reads 0x80000000 when the bootloader is ready (psp_v13_0_wait_for_bootloader). After SOS,
   C2PMSG_81 turns non-zero.
2. KM ring (psp_v13_0_ring_create): wait for bit 31 of C2PMSG_64, ring MC address in C2PMSG_69/70, size in
   C2PMSG_71, PSP_RING_TYPE__KM << 16 in C2PMSG_64, then bit 31 with status 0 in bits 15:0.
3. Commands (psp_cmd_submit_buf, psp_ring_cmd_submit): a psp_gfx_cmd_resp in the command buffer, a
   psp_gfx_rb_frame at the write pointer (C2PMSG_67, in dwords) naming it and a fence; the PSP answers in
   resp and writes the fence value, which is polled in memory (not a register: over USB every register read
   is a round trip).
4. LOAD_TOC (the answer carries the TMR size), LOAD_IP_FW of SMU (MP0 13.0.0/13.0.7 have
   pmfw_centralized_cstate_management: SMU before the TMR), SETUP_TMR, LOAD_IP_FW of every GFX/SDMA/MES/IMU/RLC
   component in AMDGPU_UCODE_ID order with AUTOLOAD_RLC right after RLC_G (autoload_supported), then the
   sos package's register list as GFX_FW_TYPE_REG_LIST (psp_rl_load). TAs (ASD, RAS, HDCP, ...) are not
   loaded: compute needs none.

The PSP runtime database (psp_sw_init, psp_get_runtime_db_entry): the boot firmware leaves it at VRAM size -
PSP_RUNTIME_DB_OFFSET (1 MiB below the top, in the firmware-reserved area): a header (cookie 0x0ed5), a
directory of entries, and among them the SCPM status (PPTABLE_ERR_STATUS). `runtime_scpm(dev)` reads it: with
SCPM the SMU refuses the feature-mask messages (amdrv.ip.smu). No database, or a bad one, means SCPM off, as
upstream decides.

Where the buffers live:
- The 1 MiB firmware staging buffer, as upstream's fw_pri_bo (psp_sw_init: PSP_1_MEG, PSP_1_MEG aligned,
  GTT unless SR-IOV), is host DMA memory (`pci.alloc_dma`) mapped through the GART (`gmc.map_system`, VMID 0,
  which GMC hw_init enabled before the PSP, upstream and here) at a 1 MiB-aligned MC address, since
  C2PMSG_36 takes it >> 20. The PSP reads it through the MMHUB. Over USB that memory is the bridge's SRAM
  (not coherent: written in the host view, then `push()`ed page by page), so the ~4 MB upload costs a few
  thousand round trips instead of ~4 M BAR0 TLPs. Made without a GMC (`PSP(dev)`, or `stage_in="vram"`)
  the buffer is VRAM from the heap (low VRAM, reachable through a 256 MiB BAR0). Either way it is freed
  (and unmapped) after the load.
- The ring, fence, command buffer and TMR are VRAM boot memory, allocated when the PSP object is made (so
  that every block's boot allocations land at the same addresses on every boot, warm ones included, which
  do not load firmware). The TMR must be VRAM (the PSP refuses anything else); it is reserved at
  TMR_RESERVE, what the Navi31/Navi33 TOCs ask for; SETUP_TMR gives the size the TOC answered.

Differences from upstream, and why:
- Components are staged one at a time in the 1 MiB buffer (upstream keeps every ucode in its own BO), and
  only what differs from what the buffer already holds is written (4 KiB pages in DMA memory; the changed
  head and the old tail in VRAM): a stage identical to the last is not written at all (the RS64 stacks of
  one file are the same bytes). Fewer bytes over a slow link.
- A response status other than 0 is an error (upstream only warns outside SR-IOV): a refused firmware load
  leaves the GPU unusable, so the boot stops with the firmware, command and status named.
- A bootloader or ring-control answer with the ready bit and a non-zero status fails at once instead of
  waiting for the timeout (psp_v13_0.c: "If there is an error in processing command, bits[7:0] will be set").
"""
from __future__ import annotations

import dataclasses
import struct

from amdrv import structs
from amdrv.autogen import psp as P
from amdrv.firmware import Component, FirmwareError, FirmwareImage, files_for, parse
from amdrv.firmware.headers import kind_of
from amdrv.ip.base import IPBlock
from amdrv.poll import poll

READY = 0x80000000
TMR_RESERVE = 0x1300000              # LOAD_TOC's answer on a 7900 XTX ("reserve 0x1300000 ... for PSP TMR")
RING_SIZE = 0x1000                   # psp_v13_0_ring_init: one 4 KiB page
FRAME_SIZE = 64                      # sizeof(struct psp_gfx_rb_frame)
# The staging buffer behind a USB bridge, whose host DMA memory is its 512 KiB SRAM (docs/usb.md, SRAM budget):
# room for the largest image the AM chips stage (gc_11_0_0_mec.bin, 407 072 bytes in linux-firmware 20230210)
# with the bridge's dummy pages and GART tables beside it. Upstream's 1 MiB (PSP_1_MEG) is what it allocates,
# not what an image needs: each command names its image's size.
STAGE_BYTES_BRIDGE = 448 << 10
HDP_FLUSH_ADDR = 0x80000 - 0x1000    # soc21.c MMIO_REG_HOLE_OFFSET + KFD_MMIO_REMAP_HDP_MEM_FLUSH_CNTL (0)

DB_HEADER = structs.get(P, "psp_runtime_data_header")
DB_DIR = structs.get(P, "psp_runtime_data_directory")
DB_SCPM = structs.get(P, "psp_runtime_scpm_entry")
CMD = structs.get(P, "psp_gfx_cmd_resp")
RESP_OFFSET = CMD.offset("resp")
FRAME = structs.get(P, "psp_gfx_rb_frame")

# AMDGPU_UCODE_ID order (amdgpu_ucode.h) of the components the PSP loads, by the firmware parser's names;
# psp_load_non_psp_fw walks adev->firmware.ucode[] in this order.
UCODE_ORDER = (
    "SDMA_UCODE_TH0", "SDMA_UCODE_TH1",
    "RS64_PFP", "RS64_ME", "RS64_MEC",
    "RS64_PFP_P0_STACK", "RS64_PFP_P1_STACK", "RS64_ME_P0_STACK", "RS64_ME_P1_STACK",
    "RS64_MEC_P0_STACK", "RS64_MEC_P1_STACK", "RS64_MEC_P2_STACK", "RS64_MEC_P3_STACK",
    "CP_MES", "MES_STACK", "CP_MES_KIQ", "MES_KIQ_STACK",
    "IMU_I", "IMU_D",
    "GLOBAL_TAP_DELAYS", "SE0_TAP_DELAYS", "SE1_TAP_DELAYS", "SE2_TAP_DELAYS", "SE3_TAP_DELAYS",
    "RLC_RESTORE_LIST_SRM_CNTL", "RLC_RESTORE_LIST_GPM_MEM", "RLC_RESTORE_LIST_SRM_MEM",
    "RLC_IRAM", "RLC_DRAM_BOOT", "RLC_P", "RLC_V", "RLC_G",
)
AUTOLOAD_AFTER = "RLC_G"

# psp_hw_start: (sos package component whose presence sends the command, component staged, command), in order.
# TOS_SPL_TABLE is sent when the package has an SPL but stages the KDB (psp_v13_0_bootloader_load_spl on MP0 13).
BOOTLOADER = (
    ("KDB", "KDB", P.PSP_BL__LOAD_KEY_DATABASE), ("SPL", "KDB", P.PSP_BL__LOAD_TOS_SPL_TABLE),
    ("SYS_DRV", "SYS_DRV", P.PSP_BL__LOAD_SYSDRV), ("SOC_DRV", "SOC_DRV", P.PSP_BL__LOAD_SOCDRV),
    ("INTF_DRV", "INTF_DRV", P.PSP_BL__LOAD_INTFDRV), ("DBG_DRV", "DBG_DRV", P.PSP_BL__LOAD_DBGDRV),
    ("RAS_DRV", "RAS_DRV", P.PSP_BL__LOAD_RASDRV), ("SOS", "SOS", P.PSP_BL__LOAD_SOSDRV),
)

# psp_gfx_if.h has TEE_SUCCESS and TEE_ERROR_NOT_SUPPORTED of the GlobalPlatform TEE error codes; the others
# are the same family (GlobalPlatform TEE Internal Core API), with what each means for a firmware load.
STATUS = {
    0xFFFF0000: ("TEE_ERROR_GENERIC", "the PSP failed the command"),
    0xFFFF0001: ("TEE_ERROR_ACCESS_DENIED", "the PSP refused access"),
    0xFFFF0005: ("TEE_ERROR_BAD_FORMAT", "the payload is not in the format the PSP expects"),
    0xFFFF0006: ("TEE_ERROR_BAD_PARAMETERS", "an address or size in the command is wrong"),
    0xFFFF0007: ("TEE_ERROR_BAD_STATE", "the command came out of order (a firmware it depends on is not loaded)"),
    0xFFFF0008: ("TEE_ERROR_ITEM_NOT_FOUND", "the PSP does not know that item"),
    0xFFFF0009: ("TEE_ERROR_NOT_IMPLEMENTED", "this PSP firmware does not implement the command"),
    P.TEE_ERROR_NOT_SUPPORTED: ("TEE_ERROR_NOT_SUPPORTED", "this PSP does not support it on this GPU"),
    0xFFFF000C: ("TEE_ERROR_OUT_OF_MEMORY", "the PSP ran out of memory (TMR too small?)"),
    0xFFFF000D: ("TEE_ERROR_BUSY", "the PSP is busy"),
    0xFFFF000F: ("TEE_ERROR_SECURITY", "the signature check refused the payload: the firmware bytes are not "
                 "the signed file (corrupt, wrongly cut out of its file, or another version than the pinned "
                 "linux-firmware)"),
    P.PSP_ERR_UNKNOWN_COMMAND: ("PSP_ERR_UNKNOWN_COMMAND", "the secure OS does not know the command"),
}
CMD_NAMES = {getattr(P, n): n.removeprefix("GFX_CMD_ID_") for n in P.ENUMS["psp_gfx_cmd_id"]}
BL_NAMES = {getattr(P, n): n.removeprefix("PSP_BL__") for n in P.ENUMS["psp_bootloader_cmd"]}


class PSPError(Exception):
    """The PSP refused or failed a command; the message names the device, the command, the firmware and
    the status."""


class PSPTimeout(PSPError):
    """The PSP did not answer in time; the message names the register or fence and what was awaited."""


def runtime_db_entry(dev, entry_type: int) -> bytes | None:
    """The bytes of one PSP runtime database entry, or None when there is no database or no such entry
    (psp_get_runtime_db_entry). Two VRAM reads: header and directory, then the entry."""
    pos = dev.vram.size - P.PSP_RUNTIME_DB_OFFSET
    head = dev.vram.read(pos, DB_HEADER.size + DB_DIR.size)
    if DB_HEADER.unpack(head[:DB_HEADER.size]).cookie != P.PSP_RUNTIME_DB_COOKIE_ID:
        return None
    d = DB_DIR.unpack(head[DB_HEADER.size:])
    if d.entry_count >= P.PSP_RUNTIME_DB_DIAG_ENTRY_MAX_COUNT:
        return None
    for e in d.entry_list[:d.entry_count]:
        if e.entry_type == entry_type:
            return dev.vram.read(pos + e.offset, e.size)
    return None


def runtime_scpm(dev) -> bool:
    """Whether the PMFW runs with SCPM (psp_sw_init: the PPTABLE_ERR_STATUS entry, not SCPM_DISABLE)."""
    raw = runtime_db_entry(dev, P.PSP_RUNTIME_ENTRY_TYPE_PPTABLE_ERR_STATUS)
    if raw is None or len(raw) < DB_SCPM.size:
        return False
    return DB_SCPM.unpack(raw[:DB_SCPM.size]).scpm_status != P.SCPM_DISABLE


def describe_status(status: int) -> str:
    name, meaning = STATUS.get(status, ("unknown status", "see psp_gfx_if.h"))
    return f"{status:#010x} ({name}: {meaning})"


@dataclasses.dataclass(frozen=True)
class Load:
    """One LOAD_IP_FW: the file, its component and the psp_gfx_fw_type it is loaded as."""
    file: str
    component: Component
    fw_type: int

    @property
    def what(self) -> str:
        return f"{self.file} {self.component.name}"


class PSP(IPBlock):
    """The PSP of one AMDevice. `init()` brings it from power-on (or a running sOS) to RLC autoload started.

    `images` caches the parsed firmware files by name; a test may replace one to feed the PSP other bytes.
    `timeout_s` bounds every wait. `gmc` (amdrv.ip.gmc.GMC, initialised before `init()`): the staging
    buffer is DMA memory it maps (stage_in "dma", the default with a GMC); without one, or with
    stage_in="vram", it is VRAM. `staging` says which the last load used. `flush_hdp` is called after the
    CPU wrote VRAM the PSP will read; the default writes the HDP flush register through the remap page NBIO
    sets up (hdp_v6_0_flush_hdp), which upstream programs before the PSP starts (soc21_common_hw_init).
    """

    def __init__(self, dev, flush_hdp=None, timeout_s: float = 2.0, gmc=None, stage_in: str | None = None):
        self.dev = dev
        self.gmc = gmc
        if stage_in not in (None, "dma", "vram"):
            raise ValueError(f"stage_in must be 'dma', 'vram' or None, not {stage_in!r}")
        if stage_in == "dma" and gmc is None:
            raise ValueError("stage_in='dma' needs the GMC (gmc=), which maps the buffer for the PSP")
        self.stage_in = stage_in or ("dma" if gmc is not None else "vram")
        self.timeout_s = timeout_s
        self.flush_hdp = flush_hdp or (lambda: dev.mmio.write32(HDP_FLUSH_ADDR, 0))
        mp0 = dev.reg("MP0")
        self.c2pmsg = {n: mp0.reg(f"MP0_SMN_C2PMSG_{n}") for n in (35, 36, 64, 67, 69, 70, 71, 81)}
        self.images: dict[str, FirmwareImage] = {}
        self.files = {kind_of(f): f for f in files_for(dev.chip)}
        self.sw_init()
        self.tmr_size = 0        # what LOAD_TOC asked for
        self._stage_block = None  # VRAM staging: the heap block
        self._stage_dma = None    # DMA staging: (pcie DMABuffer, gmc GPUMapping)
        self._staged = None      # what the staging buffer holds; None: unknown, cleared at the next stage
        self.staging = None       # where the buffer of the current (or last) load lives: "dma" or "vram"
        self._wptr = 0           # KM ring write pointer, dwords
        self._fence = 0
        self.log: list[tuple[str, str, int]] = []   # (command, firmware, status) of every ring command

    # -- firmware ---------------------------------------------------------------------------------------
    def image(self, name: str) -> FirmwareImage:
        if name not in self.images:
            self.images[name] = parse(name, self.dev.firmware.read(name))
        return self.images[name]

    def sos(self) -> FirmwareImage:
        return self.image(self.files["sos"])

    def ip_fw_loads(self) -> list[Load]:
        """The LOAD_IP_FW commands of a boot after the SMU's, in upstream's order (AUTOLOAD_RLC goes after
        the RLC_G one, the register list last)."""
        by_name = {}
        for kind in ("sdma", "pfp", "me", "mec", "mes", "mes1", "imu", "rlc"):
            img = self.image(self.files[kind])
            for c in img.components:
                if c.name not in UCODE_ORDER:
                    raise PSPError(f"{self.dev.name}: {img.name} component {c.name} has no place in the "
                                   f"PSP load order (amdrv.ip.psp.UCODE_ORDER)")
                by_name[c.name] = Load(img.name, c, c.psp_fw_type)
        loads = [by_name[n] for n in UCODE_ORDER if n in by_name]
        sos = self.sos()
        rl = [c for c in sos.components if c.name == "RL"]
        return loads + [Load(sos.name, c, P.GFX_FW_TYPE_REG_LIST) for c in rl]

    def smu_load(self) -> Load:
        img = self.image(self.files["smu"])
        c = img.component("SMU")
        return Load(img.name, c, c.psp_fw_type)

    # -- life cycle -------------------------------------------------------------------------------------
    name = "psp"
    runs_warm = False   # a warm boot finds the sOS running with the firmware it loaded: nothing to do

    def sw_init(self) -> None:
        self._ring = self.dev.mm.alloc_boot(3 * 0x1000, align=0x1000, tag="PSP ring, fence, command buffer")
        self.tmr = self.dev.mm.alloc_boot(TMR_RESERVE, align=P.PSP_TMR_ALIGNMENT, tag="PSP TMR")

    def hw_init(self, warm: bool = False) -> None:
        if not warm:
            self.init()

    # -- the whole load ---------------------------------------------------------------------------------
    def init(self) -> None:
        """Bootloader (unless sOS runs), KM ring, TOC, SMU, TMR, every GFX firmware, RLC autoload, RL."""
        self._alloc_stage()
        try:
            alive = self.sos_alive()
            if not alive:
                self.bootloader()
            self.ring_create(destroy_first=alive)
            self.tmr_size = self.load_toc()
            if self.tmr_size > self.tmr.size:
                raise PSPError(f"{self.dev.name}: PSP LOAD_TOC asks for a {self.tmr_size:#x}-byte TMR, the driver "
                               f"reserved {self.tmr.size:#x} (raise amdrv.ip.psp.TMR_RESERVE)")
            self.load_ip_fw(self.smu_load())
            self.setup_tmr()
            for ld in self.ip_fw_loads():
                self.load_ip_fw(ld)
                if ld.component.name == AUTOLOAD_AFTER:
                    self.autoload_rlc()
        finally:
            self._free_stage()

    def _alloc_stage(self) -> None:
        """The 1 MiB staging buffer (psp_sw_init's fw_pri_bo): host DMA memory mapped through the GART at a
        1 MiB-aligned MC address, or VRAM from the heap (see stage_in)."""
        if self._stage_block is not None or self._stage_dma is not None:
            return
        self._staged = None
        if self.stage_in == "dma":
            # behind a USB bridge host DMA memory is its 512 KiB SRAM (sram_left): a smaller buffer, which still
            # holds the largest image (_stage checks each)
            buf = self.dev.pci.alloc_dma(STAGE_BYTES_BRIDGE if hasattr(self.dev.pci, "sram_left") else P.PSP_1_MEG)
            try:
                m = self.gmc.map_system(buf, align=P.PSP_1_MEG)
            except BaseException:
                buf.free()
                raise
            self._stage_dma, self.staging = (buf, m), "dma"
        else:
            self._stage_block = self.dev.mm.alloc(P.PSP_1_MEG, align=P.PSP_1_MEG, tag="PSP firmware staging")
            self.staging = "vram"

    def _free_stage(self) -> None:
        if self._stage_block is not None:
            self.dev.mm.free(self._stage_block)
            self._stage_block = None
        if self._stage_dma is not None:
            buf, m = self._stage_dma
            self._stage_dma = None
            try:
                self.gmc.unmap(m)
            finally:
                buf.free()
        self._staged = None

    @property
    def stage_mc(self) -> int | None:
        """The staging buffer's MC address while it exists (VMID 0 VA = MC address for the MMHUB)."""
        if self._stage_dma is not None:
            return self._stage_dma[1].va
        if self._stage_block is not None:
            return self.dev.mc_address(self._stage_block.addr)
        return None

    @property
    def ring_addr(self) -> int:
        return self._ring.addr

    @property
    def fence_addr(self) -> int:
        return self._ring.addr + 0x1000

    @property
    def cmd_addr(self) -> int:
        return self._ring.addr + 0x2000

    def _stage(self, data: bytes) -> int:
        """psp_copy_fw: data at the start of the zeroed staging buffer; returns its MC address."""
        room = self._stage_dma[0].size if self._stage_dma is not None else P.PSP_1_MEG
        if not data or len(data) > room:
            raise PSPError(f"{self.dev.name}: PSP firmware stage of {len(data)} bytes does not fit the "
                           f"{room >> 10} KiB staging buffer")
        if self._stage_dma is not None:
            return self._stage_to_dma(data)
        addr = self._stage_block.addr
        if self._staged is None:
            self.dev.vram.write(addr, data + bytes(P.PSP_1_MEG - len(data)))
        elif self._staged != data:
            # only what differs from a zeroed buffer holding data: the tail the last stage left
            self.dev.vram.write(addr, data + bytes(max(0, len(self._staged) - len(data))))
        self._staged = data
        self.flush_hdp()
        return self.dev.mc_address(addr)

    def _stage_to_dma(self, data: bytes) -> int:
        """Into the host view, then push() only the 4 KiB pages whose bytes changed (the view is what the
        device holds: over USB a shadow of the bridge's SRAM). The first stage pushes the whole buffer, so
        that it is zeroed behind the data as psp_copy_fw's memset leaves it."""
        buf, m = self._stage_dma
        view, page = buf.view, 0x1000
        if self._staged is None:
            view[:len(data)] = data
            view[len(data):] = bytes(len(view) - len(data))
            buf.push()
        elif self._staged != data:
            new = data + bytes(max(0, len(self._staged) - len(data)))   # the old stage's tail zeroed
            runs: list[list[int]] = []                                   # dirty [start, end) byte runs
            for lo in range(0, len(new), page):
                hi = min(lo + page, len(new))
                if view[lo:hi] != new[lo:hi]:
                    view[lo:hi] = new[lo:hi]
                    if runs and runs[-1][1] == lo:
                        runs[-1][1] = hi
                    else:
                        runs.append([lo, hi])
            for lo, hi in runs:
                buf.push(lo, hi - lo)
        self._staged = data
        return m.va

    # -- waiting ----------------------------------------------------------------------------------------
    def _wait(self, n: int, done, what: str, fail=None) -> int:
        """Polls C2PMSG_n until done(value); fail(value) -> message raises at once."""
        def settled(v: int) -> bool:
            if done(v):
                return True
            if fail is not None and (msg := fail(v)):
                raise PSPError(f"{self.dev.name}: PSP {msg}")
            return False
        # min_reads=1: the PSP's timeout_s alone ends the wait, as before (psp_wait_for: usec_timeout reads)
        ok, v = poll(self.c2pmsg[n].read, settled, self.timeout_s, min_reads=1)
        if not ok:
            raise PSPTimeout(f"{self.dev.name}: PSP timeout after {self.timeout_s:g} s waiting for {what} "
                             f"(MP0_SMN_C2PMSG_{n} = {v:#010x})")
        return v

    def sos_alive(self) -> bool:
        return self.c2pmsg[81].read() != 0

    # -- bootloader ---------------------------------------------------------------------------------------
    def bootloader(self) -> None:
        """KDB, TOS_SPL_TABLE (the KDB again), SYS_DRV (, SOC/INTF/DBG/RAS drivers), SOS."""
        sos = self.sos()
        comps = {c.name: c for c in sos.components}
        for when, staged, cmd in BOOTLOADER:
            if when in comps and staged not in comps:
                raise FirmwareError(f"firmware: {sos.name}: the package has no {staged} component, which "
                                    f"{BL_NAMES[cmd]} stages (it has {', '.join(comps)}): not a PSP sos package")
        # psp_hw_start skips an absent SYS_DRV or SOS (is_psp_fw_valid) and then times out waiting for a secure
        # OS that never starts: say why instead.
        for needed in ("SYS_DRV", "SOS"):
            if needed not in comps:
                raise FirmwareError(f"firmware: {sos.name}: the package has no {needed} component (it has "
                                    f"{', '.join(comps)}): not a PSP sos package")
        for when, staged, cmd in BOOTLOADER:
            if when in comps:
                self._bootloader_load(sos.name, comps[staged], cmd)

    def _bootloader_load(self, file: str, comp: Component, cmd: int) -> None:
        what = f"bootloader {BL_NAMES[cmd]} of {file} {comp.name}"
        self._wait(35, lambda v: v == READY, f"the bootloader to be ready (0x80000000) before {what}")
        mc = self._stage(comp.data)
        self.c2pmsg[36].write(mc >> 20)
        self.c2pmsg[35].write(cmd)

        def refused(v):
            if v & READY and v != READY:
                return f"{what} failed: C2PMSG_35 = {v:#010x} (the bootloader refused the component: corrupt or " \
                       f"not the pinned {file})"
        if cmd != P.PSP_BL__LOAD_SOSDRV:
            self._wait(35, lambda v: v == READY, f"{what} to finish (C2PMSG_35 = 0x80000000)", refused)
            return
        # psp_v13_0_bootloader_load_sos: the secure OS says it runs in C2PMSG_81
        reg35 = self.c2pmsg[35]
        self._wait(81, lambda v: v != 0, f"the secure OS to start after {what} (C2PMSG_81 non-zero)",
                   lambda v: refused(reg35.read()))

    # -- KM ring ---------------------------------------------------------------------------------------
    def ring_create(self, destroy_first: bool = False) -> None:
        """A fresh KM ring; destroy_first when the secure OS was left running by an earlier boot, whose ring
        it may still hold."""
        if destroy_first:
            self.ring_stop()
        self._wait(64, lambda v: v & READY, "the secure OS to be ready for ring creation (C2PMSG_64 bit 31)")
        self.dev.vram.write(self.ring_addr, bytes(RING_SIZE + 0x1000))   # ring and fence page cleared
        self.flush_hdp()
        mc = self.dev.mc_address(self.ring_addr)
        self.c2pmsg[69].write(mc & 0xFFFFFFFF)
        self.c2pmsg[70].write(mc >> 32)
        self.c2pmsg[71].write(RING_SIZE)
        self._ring_ctrl(P.PSP_RING_TYPE__KM << 16, "KM ring creation")
        self._wptr, self._fence = self.c2pmsg[67].read(), 0

    def ring_stop(self) -> None:
        """GFX_CTRL_CMD_ID_DESTROY_RINGS (psp_v13_0_ring_stop)."""
        self._ring_ctrl(P.GFX_CTRL_CMD_ID_DESTROY_RINGS, "DESTROY_RINGS")

    def _ring_ctrl(self, value: int, what: str) -> None:
        self.c2pmsg[64].write(value)

        def refused(v):
            if v & READY and v & 0xFFFF:
                return f"{what} failed: C2PMSG_64 status {v & 0xFFFF:#06x}"
        self._wait(64, lambda v: v & 0x8000FFFF == READY, f"{what} (C2PMSG_64 bit 31, status 0)", refused)

    # -- commands ---------------------------------------------------------------------------------------
    def submit(self, cmd_id: int, what: str = "", **cmd) -> dict:
        """One ring command (psp_cmd_submit_buf); returns psp_gfx_resp as a dict, raises on a non-zero status."""
        name = CMD_NAMES.get(cmd_id, f"command {cmd_id:#x}")
        buf = CMD.pack(cmd_id=cmd_id, cmd=cmd)   # resp zeroed: a stale status is never read back
        self.dev.vram.write(self.cmd_addr, buf)
        # a u32 as upstream's fence_value, but past 0xFFFFFFFF to 1: 0 is what the cleared fence page holds,
        # so a wrapped fence of 0 would read as done before the PSP ran the command
        self._fence = self._fence % 0xFFFFFFFF + 1
        slot = self._wptr % (RING_SIZE // 4)
        cmd_mc, fence_mc = self.dev.mc_address(self.cmd_addr), self.dev.mc_address(self.fence_addr)
        frame = FRAME.pack(cmd_buf_addr_lo=cmd_mc & 0xFFFFFFFF, cmd_buf_addr_hi=cmd_mc >> 32,
                           fence_addr_lo=fence_mc & 0xFFFFFFFF, fence_addr_hi=fence_mc >> 32,
                           fence_value=self._fence)
        self.dev.vram.write(self.ring_addr + slot * 4, frame)
        self.flush_hdp()
        self._wptr = (slot + FRAME_SIZE // 4) % (RING_SIZE // 4)
        self.c2pmsg[67].write(self._wptr)
        self._wait_fence(f"{name}{' of ' + what if what else ''}")
        r = self.dev.vram.read(self.cmd_addr + RESP_OFFSET, 20)
        status, _, fw_lo, fw_hi, tmr_size = struct.unpack("<5I", r)
        self.log.append((name, what, status))
        if status:
            raise PSPError(f"{self.dev.name}: PSP {name}{' of ' + what if what else ''} failed: status "
                           f"{describe_status(status)}")
        return {"status": status, "fw_addr": fw_lo | fw_hi << 32, "tmr_size": tmr_size}

    def _wait_fence(self, what: str) -> None:
        """Polls the KM ring's fence in VRAM (psp_cmd_submit_buf) until it holds this command's value."""
        ok, got = poll(lambda: self.dev.vram.read32(self.fence_addr), lambda v: v == self._fence,
                       self.timeout_s, min_reads=1, interval_s=50e-6)
        if not ok:
            raise PSPTimeout(f"{self.dev.name}: PSP timeout after {self.timeout_s:g} s waiting for {what}: "
                             f"the fence at VRAM {self.fence_addr:#x} holds {got}, expected {self._fence} "
                             f"(the secure OS did not process the KM ring; write pointer C2PMSG_67 = "
                             f"{self._wptr:#x})")

    def load_toc(self) -> int:
        """LOAD_TOC (psp_load_toc); returns the TMR size the PSP asks for."""
        sos = self.sos()
        toc = sos.component("TOC")
        mc = self._stage(toc.data)
        r = self.submit(P.GFX_CMD_ID_LOAD_TOC, f"{sos.name} TOC",
                        cmd_load_toc=dict(toc_phy_addr_lo=mc & 0xFFFFFFFF, toc_phy_addr_hi=mc >> 32,
                                          toc_size=toc.size))
        if not r["tmr_size"]:
            raise PSPError(f"{self.dev.name}: PSP LOAD_TOC of {sos.name} TOC answered a TMR size of 0")
        return r["tmr_size"]

    def setup_tmr(self) -> None:
        """SETUP_TMR (psp_prep_tmr_cmd_buf): MC address, size, and the VRAM physical address (the VRAM
        offset: a dGPU's MC_VM_FB_OFFSET is 0, which amdgpu_gmc_vram_pa would add)."""
        mc = self.dev.mc_address(self.tmr.addr)
        self.submit(P.GFX_CMD_ID_SETUP_TMR, f"{self.tmr_size:#x} bytes at VRAM {self.tmr.addr:#x}",
                    cmd_setup_tmr=dict(buf_phy_addr_lo=mc & 0xFFFFFFFF, buf_phy_addr_hi=mc >> 32,
                                       buf_size=self.tmr_size, bitfield=dict(virt_phy_addr=1),
                                       system_phy_addr_lo=self.tmr.addr & 0xFFFFFFFF,
                                       system_phy_addr_hi=self.tmr.addr >> 32))

    def load_ip_fw(self, ld: Load) -> dict:
        """LOAD_IP_FW of one component (psp_prep_load_ip_fw_cmd_buf)."""
        mc = self._stage(ld.component.data)
        return self.submit(P.GFX_CMD_ID_LOAD_IP_FW, ld.what,
                           cmd_load_ip_fw=dict(fw_phy_addr_lo=mc & 0xFFFFFFFF, fw_phy_addr_hi=mc >> 32,
                                               fw_size=ld.component.size, fw_type=ld.fw_type))

    def autoload_rlc(self) -> None:
        """AUTOLOAD_RLC (psp_rlc_autoload_start): the RLC boots GFX from what the PSP loaded. Completion
        shows in GC's RLC_RLCS_BOOTLOAD_STATUS.BOOTLOAD_COMPLETE (the GFX block waits for it). A refusal
        names the files whose components were loaded: one of them lacked a piece the RLC needs."""
        files = sorted({ld.file for ld in self.ip_fw_loads() if ld.file != self.files["sos"]})
        self.submit(P.GFX_CMD_ID_AUTOLOAD_RLC, "the RLC, after the components of " + ", ".join(files))

