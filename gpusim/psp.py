"""PSP 13.0.0 (MP0): the bootloader mailbox, the KM (GPCOM) ring and the commands a Navi31 boot sends.

Facts, from psp_v13_0.c, amdgpu_psp.c, psp_gfx_if.h and amdgpu_psp.h (registers from mp_13_0_0):
- Bootloader: MP0_SMN_C2PMSG_35 reads 0x80000000 when the bootloader is ready (psp_v13_0_wait_for_bootloader);
  the driver stages a component in its 1 MiB firmware buffer, writes that buffer's MC address >> 20 to
  C2PMSG_36 and the command (PSP_BL__LOAD_*) to C2PMSG_35, then waits for 0x80000000 again. There is no
  size: the bootloader knows its component, so the staged bytes are compared with the whole component.
  PSP_BL__LOAD_SOSDRV starts the secure OS, which says it is alive in C2PMSG_81 (psp_v13_0_is_sos_alive).
- Navi31's order (psp_hw_start, with the components psp_13_0_0_sos.bin carries: SYS_DRV, SOS, TOC, KDB, SPL,
  RL): KEY_DATABASE (KDB), TOS_SPL_TABLE, SYSDRV, then SOSDRV. psp_hw_start sends TOS_SPL_TABLE when the
  package has an SPL component, but psp_v13_0_bootloader_load_spl stages the KDB bytes for it (6.1, and every
  later psp_v13_0.c/psp_v13_0_4.c; tinygrad's AM driver, which boots real 7900 XTXs, does the same for MP0 13
  and stages SPL only from MP0 14): the model accepts only the KDB there. soc/intf/dbg/ras drivers would go
  between SYSDRV and SOSDRV if the file had them.
- The bootloader is not ready at once after power-on or a mode1 reset: C2PMSG_35 reads 0 until it has
  started (psp_v13_0_wait_for_bootloader polls for 0x80000000 before the first command, up to 10 x 100 ms).
  How long it takes is not public; the model takes a seeded number of clock steps (BL_READY_STEPS). A command
  written before then is lost: the starting bootloader writes its ready value over it (assumption).
- KM ring: once sOS is up C2PMSG_64 reads 0x80000000 (ready for ring creation); the driver writes the ring's
  MC address to C2PMSG_69/70, its size to C2PMSG_71 and PSP_RING_TYPE__KM << 16 (GFX_CTRL_CMD_ID_INIT_GPCOM_RING)
  to C2PMSG_64, and waits for bit 31 with status 0 in bits 15:0. C2PMSG_67 is the write pointer in dwords;
  each 64-byte psp_gfx_rb_frame names a 1 KiB psp_gfx_cmd_resp (MC address), a fence address and value.
  The PSP executes the command, writes psp_gfx_resp (status, fw_addr, tmr_size) at +0x360 of the command
  buffer, then the fence value (psp_cmd_submit_buf polls it). GFX_CTRL_CMD_ID_DESTROY_RINGS tears it down.
- Commands of the boot (psp_hw_start, psp_load_non_psp_fw; MP0 13.0.0 and 13.0.7 have autoload_supported and
  pmfw_centralized_cstate_management): LOAD_TOC (the TOC component; the response carries the TMR size,
  0x1300000 as a 7900 XTX logs "reserve 0x1300000 ... for PSP TMR"), LOAD_IP_FW of SMU, SETUP_TMR (only
  after the SMU firmware: amdgpu_psp.c, "For ASICs with DF Cstate management centralized to PMFW, TMR setup
  should be performed after PMFW loaded and before other non-psp firmware loaded"; refused with
  TEE_ERROR_BAD_STATE before it, the failure mode being an assumption), SETUP_TMR (VRAM,
  1 MiB aligned, at least that size; virt_phy_addr with the matching VRAM physical address), LOAD_IP_FW of
  every other firmware in AMDGPU_UCODE_ID order, AUTOLOAD_RLC right after RLC_G, then (psp_rl_load) the sos
  package's RL component as LOAD_IP_FW of type REG_LIST.
- Structures (psp_gfx_cmd_resp, psp_gfx_rb_frame, psp_gfx_resp) are decoded and encoded through the tables
  generated from psp_gfx_if.h (amdrv.autogen.psp), never hand offsets.
- Status codes: TEE_SUCCESS and TEE_ERROR_NOT_SUPPORTED (0xFFFF000A) are in psp_gfx_if.h, and that value is
  GlobalPlatform's; the other TEE_ERROR_* used here are the GlobalPlatform TEE codes of the same family.
  PSP_ERR_UNKNOWN_COMMAND (0x100) answers a command id the sOS does not know.

- The runtime database (amdgpu_psp.h PSP_RUNTIME_DB_*, read by psp_get_runtime_db_entry at VRAM size -
  PSP_RUNTIME_DB_OFFSET): the boot firmware leaves a psp_runtime_data_header (cookie 0x0ed5, version 0x0100),
  a psp_runtime_data_directory right after it and a PPTABLE_ERR_STATUS entry (psp_runtime_scpm_entry) with
  SCPM_ENABLE or SCPM_DISABLE as the board has SCPM (dev.scpm); psp_sw_init sets adev->scpm_enabled from it.
  Written at power-on and at every mode1 reset, as the discovery binary is (gpusim.board). That the Navi31
  PSP writes the database at all is an assumption (psp_sw_init only warns when it does not exist).

Simulator choices (no public fact): a bootloader failure reads back 0x80000000 | code in C2PMSG_35 (the
psp_v13_0.c comment for newer PSPs: "bits[7:0] will be set"); the codes are BL_ERR_*. A payload that is not
byte-identical to the pinned component of its type fails signature verification: TEE_ERROR_SECURITY. A
command out of order: TEE_ERROR_BAD_STATE. TAs (LOAD_TA, LOAD_ASD, INVOKE_CMD) and BOOT_CFG are answered
TEE_ERROR_NOT_SUPPORTED: no TA is modeled and upstream only warns. Every refusal is also recorded in
dev.errors with the firmware named.
"""
import functools
import random
import struct
import zlib

from amdrv import structs
from amdrv.autogen import psp as P
from amdrv.autogen import ucode as U
from amdrv.chips import by_name
from gpusim import fwcheck, gfx
from gpusim.device import Block, DMAError
from gpusim.gmc import VMFault

MP0 = "MP0"
READY = 0x80000000
TMR_SIZE = 0x1300000
TMR_ALIGN = P.PSP_TMR_ALIGNMENT
BL_STEPS = 3       # clock steps a bootloader command takes
# Seeded latencies (clock steps; assumption: no public figure), drawn per event from a generator seeded by the
# chip, so a stepped run is deterministic. Small, since in stepped mode every step is one polled register read.
BL_READY_STEPS = (16, 48)   # power-on or mode1 reset to the bootloader's ready value in C2PMSG_35
RING_STEPS = (4, 16)        # a C2PMSG_64 ring control command (upstream mdelay(20)s, then polls)
AUTOLOAD_STEPS = gfx.AUTOLOAD_STEPS   # AUTOLOAD_RLC to BOOTLOAD_COMPLETE, the RLC's time (gpusim.gfx)
MEM_ERRORS = (DMAError, IndexError, VMFault)   # an access the memory path refused

TEE_SUCCESS = P.TEE_SUCCESS
TEE_ERROR_BAD_PARAMETERS = 0xFFFF0006
TEE_ERROR_BAD_STATE = 0xFFFF0007
TEE_ERROR_NOT_SUPPORTED = P.TEE_ERROR_NOT_SUPPORTED
TEE_ERROR_SECURITY = 0xFFFF000F
PSP_ERR_UNKNOWN_COMMAND = P.PSP_ERR_UNKNOWN_COMMAND

BL_ERR_PAYLOAD, BL_ERR_ORDER, BL_ERR_COMMAND, BL_ERR_BUSY = 1, 2, 3, 4

# bootloader command, the sos component whose presence makes psp_hw_start send it, the component it stages
BOOT_ORDER = (
    (P.PSP_BL__LOAD_KEY_DATABASE, U.PSP_FW_TYPE_PSP_KDB, U.PSP_FW_TYPE_PSP_KDB),
    # sent when the package has an SPL (psp_hw_start), staging the KDB (psp_v13_0_bootloader_load_spl)
    (P.PSP_BL__LOAD_TOS_SPL_TABLE, U.PSP_FW_TYPE_PSP_SPL, U.PSP_FW_TYPE_PSP_KDB),
    (P.PSP_BL__LOAD_SYSDRV, U.PSP_FW_TYPE_PSP_SYS_DRV, U.PSP_FW_TYPE_PSP_SYS_DRV),
    (P.PSP_BL__LOAD_SOCDRV, U.PSP_FW_TYPE_PSP_SOC_DRV, U.PSP_FW_TYPE_PSP_SOC_DRV),
    (P.PSP_BL__LOAD_INTFDRV, U.PSP_FW_TYPE_PSP_INTF_DRV, U.PSP_FW_TYPE_PSP_INTF_DRV),
    (P.PSP_BL__LOAD_DBGDRV, U.PSP_FW_TYPE_PSP_DBG_DRV, U.PSP_FW_TYPE_PSP_DBG_DRV),
    (P.PSP_BL__LOAD_RASDRV, U.PSP_FW_TYPE_PSP_RAS_DRV, U.PSP_FW_TYPE_PSP_RAS_DRV),
    (P.PSP_BL__LOAD_SOSDRV, U.PSP_FW_TYPE_PSP_SOS, U.PSP_FW_TYPE_PSP_SOS),
)
BL_NAMES = {v: k for k in P.ENUMS["psp_bootloader_cmd"] for v in [getattr(P, k)]}
CMD_NAMES = {getattr(P, k): k for k in P.ENUMS["psp_gfx_cmd_id"]}

DB_HEADER = structs.get(P, "psp_runtime_data_header")
DB_DIR = structs.get(P, "psp_runtime_data_directory")
DB_SCPM = structs.get(P, "psp_runtime_scpm_entry")
CMD_RESP = structs.get(P, "psp_gfx_cmd_resp")
RESP = structs.get(P, "psp_gfx_resp")
FRAME = structs.get(P, "psp_gfx_rb_frame")
CMD_BUF_SIZE = CMD_RESP.size
RESP_OFFSET = CMD_RESP.offset("resp")
FRAME_SIZE = FRAME.size
# MP0 versions with pmfw_centralized_cstate_management (amdgpu_psp.c psp_check_pmfw_centralized_cstate_management)
PMFW_CENTRALIZED = {(11, 0, 0), (11, 0, 4), (11, 0, 5), (11, 0, 7), (11, 0, 9), (11, 0, 11), (11, 0, 12),
                    (11, 0, 13), (13, 0, 0), (13, 0, 2), (13, 0, 7)}


class PSP(Block):
    name = "PSP"

    def __init__(self, dev, firmware: fwcheck.PinnedFirmware | None = None):
        super().__init__(dev)
        self._fw = firmware

    @property
    def firmware(self) -> fwcheck.PinnedFirmware:
        """The pinned firmware the payloads are checked against (found through the firmware store)."""
        if self._fw is None:
            self._fw = fwcheck.PinnedFirmware(by_name(self.dev.chip))
        return self._fw

    @firmware.setter
    def firmware(self, fw: fwcheck.PinnedFirmware) -> None:
        self._fw = fw

    def __getstate__(self):
        s = dict(self.__dict__)
        s["_fw"] = None     # holds a reader function; found again through the store after loading
        return s

    def attach(self) -> None:
        self.on_write(MP0, "MP0_SMN_C2PMSG_35", self._w_bootloader)
        self.on_write(MP0, "MP0_SMN_C2PMSG_64", self._w_ring_ctrl)
        self.on_write(MP0, "MP0_SMN_C2PMSG_67", self._w_wptr)

    def reset(self) -> None:
        self.bl_done: list[int] = []          # bootloader commands completed, in order
        self.bl_ready = False                  # the bootloader has started since power-on / mode1 reset
        self.sos_alive = False
        self.ring: tuple[int, int] | None = None   # (MC address, size in bytes)
        self.rptr = 0                          # dwords
        self.toc_loaded = False
        self.tmr: tuple[int, int] | None = None    # (MC address, size)
        self._tmr_next = 0
        self.loaded: dict[int, int] = {}       # GFX_FW_TYPE_* -> times loaded
        self.autoload_started = False
        self.log: list[tuple[int, int, int]] = []   # (cmd id, fw type or 0, status) of every ring command
        if not hasattr(self, "rng"):           # one stream per device: reset draws go on from where they were
            self.rng = random.Random(zlib.crc32(f"PSP {self.dev.chip}".encode()))
        self.set(MP0, "MP0_SMN_C2PMSG_35", 0)
        self.dev.schedule(self.rng.randint(*BL_READY_STEPS), self._bl_start)
        self._write_runtime_db()

    def _write_runtime_db(self) -> None:
        """The PSP runtime database at VRAM size - PSP_RUNTIME_DB_OFFSET, with the SCPM entry."""
        scpm_at = DB_HEADER.size + DB_DIR.size
        entry = dict(entry_type=P.PSP_RUNTIME_ENTRY_TYPE_PPTABLE_ERR_STATUS, offset=scpm_at, size=DB_SCPM.size)
        db = (DB_HEADER.pack(cookie=P.PSP_RUNTIME_DB_COOKIE_ID, version=P.PSP_RUNTIME_DB_VER_1)
              + DB_DIR.pack(entry_count=1, entry_list=[entry])
              + DB_SCPM.pack(scpm_status=P.SCPM_ENABLE if getattr(self.dev, "scpm", True) else P.SCPM_DISABLE))
        self.dev.vram.write(self.dev.vram.size - P.PSP_RUNTIME_DB_OFFSET, db)

    def _bl_start(self) -> None:
        """The bootloader has come up: it writes its ready value, over whatever the driver wrote."""
        if self.get(MP0, "MP0_SMN_C2PMSG_35"):
            self.error(f"bootloader command {self.get(MP0, 'MP0_SMN_C2PMSG_35'):#x} written before the "
                       f"bootloader was ready (C2PMSG_35 read 0; psp_v13_0_wait_for_bootloader waits for "
                       f"0x80000000): lost")
        self.bl_ready = True
        self.set(MP0, "MP0_SMN_C2PMSG_35", READY)

    # -- state for the other models -----------------------------------------------------------------
    @property
    def rlc_autoload_complete(self) -> bool:
        return self.dev.blocks["GFX"].rlc_autoload_complete

    @property
    def pmfw_centralized(self) -> bool:
        return self.dev.layout.entry("MP0").version in PMFW_CENTRALIZED

    def is_loaded(self, fw_type: int) -> bool:
        return fw_type in self.loaded

    def autoload_required(self) -> set[int]:
        """The firmware AUTOLOAD_RLC needs: every GFX-side piece the chip's firmware has (all but SMU and the
        sos package's register list), as upstream loads them all before it."""
        return set(self.firmware.ip_fw_pieces()) - {P.GFX_FW_TYPE_SMU, P.GFX_FW_TYPE_REG_LIST}

    # -- bootloader ---------------------------------------------------------------------------------
    def _w_bootloader(self, value: int):
        if not self.bl_ready:
            return value    # nobody reads it yet; _bl_start writes over it
        if not self.get(MP0, "MP0_SMN_C2PMSG_35") & READY:
            self.error(f"bootloader command {value:#x} written while the previous one is still running")
            self.dev.schedule(BL_STEPS, functools.partial(self._bl_finish, BL_ERR_BUSY))
            return value
        self.dev.schedule(BL_STEPS, functools.partial(self._bl_run, value))
        return value

    def _bl_finish(self, err: int) -> None:
        self.set(MP0, "MP0_SMN_C2PMSG_35", READY | err)

    def _bl_run(self, cmd: int) -> None:
        self._bl_finish(self._bl_execute(cmd))

    def _bl_execute(self, cmd: int) -> int:
        name = BL_NAMES.get(cmd, f"{cmd:#x}")
        if self.sos_alive:
            self.error(f"bootloader command {name} after the secure OS started: the bootloader is gone")
            return BL_ERR_ORDER
        order = [c for c, _, _ in BOOT_ORDER]
        if cmd not in order:
            self.error(f"bootloader command {name} is not one PSP 13.0.0 takes at boot")
            return BL_ERR_COMMAND
        present = self.firmware.sos_pieces()
        expected = [c for c, when, _ in BOOT_ORDER if when in present]
        pos = len(self.bl_done)
        if pos >= len(expected) or expected[pos] != cmd:
            want = BL_NAMES[expected[pos]] if pos < len(expected) else "nothing more"
            self.error(f"bootloader command {name} out of order: after "
                       f"{[BL_NAMES[c] for c in self.bl_done]} it expects {want}")
            return BL_ERR_ORDER
        want = present[next(staged for c, _, staged in BOOT_ORDER if c == cmd)]
        addr = self.get(MP0, "MP0_SMN_C2PMSG_36") << 20
        try:
            staged = self.dev.blocks["GMC"].mc_read(addr, want.size)
        except MEM_ERRORS as e:
            self.error(f"bootloader {name}: staged component at MC {addr:#x} unreadable: {e}")
            return BL_ERR_PAYLOAD
        if staged != want.data:
            self.error(f"bootloader {name}: the bytes staged at MC {addr:#x} are not the pinned "
                       f"{self.firmware.files['sos']} {want.name} component this command takes (signature "
                       f"check fails)")
            return BL_ERR_PAYLOAD
        self.bl_done.append(cmd)
        if cmd == P.PSP_BL__LOAD_SOSDRV:
            self.sos_alive = True
            # C2PMSG_81 only has to be non-zero; the sOS version of the package is what it plausibly holds
            self.set(MP0, "MP0_SMN_C2PMSG_81", present[U.PSP_FW_TYPE_PSP_SOS].version or 1)
            self.set(MP0, "MP0_SMN_C2PMSG_64", READY)
        return 0

    # -- KM ring ------------------------------------------------------------------------------------
    def _w_ring_ctrl(self, value: int):
        if not self.sos_alive:
            self.error(f"C2PMSG_64 command {value:#x} with no secure OS running: nothing answers")
            return value
        self.dev.schedule(self.rng.randint(*RING_STEPS), functools.partial(self._ring_ctrl, value))
        return value

    def _ring_ctrl(self, value: int) -> None:
        cmd = value & P.GFX_CMD_ID_MASK
        status = 0
        if cmd == P.GFX_CTRL_CMD_ID_INIT_GPCOM_RING:
            addr = self.get(MP0, "MP0_SMN_C2PMSG_69") | self.get(MP0, "MP0_SMN_C2PMSG_70") << 32
            size = self.get(MP0, "MP0_SMN_C2PMSG_71")
            if self.ring is not None:
                self.error("KM ring created twice without DESTROY_RINGS")
                status = TEE_ERROR_BAD_STATE & 0xFFFF
            elif not size or size % FRAME_SIZE or addr % FRAME_SIZE:
                self.error(f"KM ring at MC {addr:#x} of {size:#x} bytes: size and address must be whole frames")
                status = TEE_ERROR_BAD_PARAMETERS & 0xFFFF
            else:
                # The driver writes its first frame at the write pointer it reads from C2PMSG_67
                # (psp_ring_cmd_submit), also after DESTROY_RINGS and a new INIT (psp_suspend/psp_resume):
                # a new ring is read from where that register stands.
                self.ring = (addr, size)
                self.rptr = self.get(MP0, "MP0_SMN_C2PMSG_67") % (size // 4)
        elif cmd == P.GFX_CTRL_CMD_ID_DESTROY_RINGS:
            self.ring = None
        else:
            self.error(f"C2PMSG_64 command {value:#x} is not modeled")
            status = PSP_ERR_UNKNOWN_COMMAND
        self.set(MP0, "MP0_SMN_C2PMSG_64", READY | status)

    def _w_wptr(self, value: int):
        # Commands complete at the write: the driver then polls a fence in memory, which (unlike a register
        # read) does not advance the stepped clock, so a delayed completion would never come.
        if self.ring is None:
            self.error(f"KM ring write pointer {value:#x} written with no ring created: ignored")
        else:
            self._ring_run(value)
        return value

    def _ring_run(self, wptr: int) -> None:
        base, size = self.ring
        size_dw, frame_dw = size // 4, FRAME_SIZE // 4
        wptr %= size_dw
        if wptr % frame_dw:
            # psp_ring_cmd_submit moves the write pointer by whole psp_gfx_rb_frames (sizeof / 4 dwords). One
            # inside a frame: the whole frames before it are consumed, the partial one waits (assumption).
            self.error(f"KM ring write pointer {wptr:#x} is inside a frame ({frame_dw} dwords each)")
        gmc = self.dev.blocks["GMC"]
        while (wptr - self.rptr) % size_dw >= frame_dw:
            try:
                frame = gmc.mc_read(base + self.rptr * 4, FRAME_SIZE)
            except MEM_ERRORS as e:
                self.error(f"KM ring frame at MC {base + self.rptr * 4:#x} unreadable: {e}")
                return
            self.rptr = (self.rptr + FRAME_SIZE // 4) % size_dw
            f = FRAME.unpack(frame)
            self._submit(f.cmd_buf_addr_lo | f.cmd_buf_addr_hi << 32, f.fence_addr_lo | f.fence_addr_hi << 32,
                         f.fence_value)

    def _submit(self, cmd_addr: int, fence_addr: int, fence_value: int) -> None:
        gmc = self.dev.blocks["GMC"]
        try:
            buf = gmc.mc_read(cmd_addr, CMD_BUF_SIZE)
        except MEM_ERRORS as e:
            self.error(f"KM ring command buffer at MC {cmd_addr:#x} unreadable: {e}")
            return
        cmd = CMD_RESP.unpack(buf)
        status, fw_addr, tmr_size, fw_type = self._execute(cmd.cmd_id, cmd.cmd)
        self.log.append((cmd.cmd_id, fw_type, status))
        resp = RESP.pack(status=status, fw_addr_lo=fw_addr & 0xFFFFFFFF, fw_addr_hi=fw_addr >> 32,
                         tmr_size=tmr_size)[:RESP.offset("reserved")]
        try:
            gmc.mc_write(cmd_addr + RESP_OFFSET, resp)
            gmc.mc_write(fence_addr, struct.pack("<I", fence_value))
        except MEM_ERRORS as e:
            self.error(f"KM ring response/fence write failed: {e}")

    # -- commands -----------------------------------------------------------------------------------
    def _execute(self, cmd_id: int, cmd) -> tuple[int, int, int, int]:
        """(status, fw_addr, tmr_size, fw_type) of one command; cmd: the decoded psp_gfx_commands union."""
        if cmd_id == P.GFX_CMD_ID_LOAD_TOC:
            c = cmd.cmd_load_toc
            return self._load_toc(c.toc_phy_addr_lo | c.toc_phy_addr_hi << 32, c.toc_size), 0, TMR_SIZE, 0
        if cmd_id == P.GFX_CMD_ID_SETUP_TMR:
            c = cmd.cmd_setup_tmr
            return self._setup_tmr(c.buf_phy_addr_lo | c.buf_phy_addr_hi << 32, c.buf_size,
                                   c.bitfield.virt_phy_addr, c.system_phy_addr_lo | c.system_phy_addr_hi << 32), 0, 0, 0
        if cmd_id == P.GFX_CMD_ID_LOAD_IP_FW:
            c = cmd.cmd_load_ip_fw
            status, at = self._load_ip_fw(c.fw_phy_addr_lo | c.fw_phy_addr_hi << 32, c.fw_size, c.fw_type)
            return status, at, 0, c.fw_type
        if cmd_id == P.GFX_CMD_ID_AUTOLOAD_RLC:
            return self._autoload_rlc(), 0, 0, 0
        if cmd_id == P.GFX_CMD_ID_DESTROY_TMR:
            self.tmr = None
            return TEE_SUCCESS, 0, 0, 0
        if cmd_id in CMD_NAMES:
            self.error(f"{CMD_NAMES[cmd_id]} is not modeled (no trusted applications): TEE_ERROR_NOT_SUPPORTED")
            return TEE_ERROR_NOT_SUPPORTED, 0, 0, 0
        self.error(f"unknown command id {cmd_id:#x}")
        return PSP_ERR_UNKNOWN_COMMAND, 0, 0, 0

    def _payload(self, what: str, addr: int, size: int, want: fwcheck.Piece) -> int:
        if size != want.size:
            self.error(f"{what}: {size} bytes, the pinned {want.file} {want.name} is {want.size} bytes "
                       f"(signature check fails)")
            return TEE_ERROR_SECURITY
        try:
            got = self.dev.blocks["GMC"].mc_read(addr, size)
        except MEM_ERRORS as e:
            self.error(f"{what}: payload at MC {addr:#x} unreadable: {e}")
            return TEE_ERROR_BAD_PARAMETERS
        if got != want.data:
            at = next(i for i in range(size) if got[i] != want.data[i])
            self.error(f"{what}: payload differs from the pinned {want.file} {want.name} at byte {at:#x} "
                       f"(offset {want.offset + at:#x} in the file; signature check fails)")
            return TEE_ERROR_SECURITY
        return TEE_SUCCESS

    def _load_toc(self, addr: int, size: int) -> int:
        toc = self.firmware.sos_pieces().get(U.PSP_FW_TYPE_PSP_TOC)
        if toc is None:
            self.error(f"LOAD_TOC: {self.firmware.files['sos']} carries no TOC")
            return TEE_ERROR_NOT_SUPPORTED
        status = self._payload("LOAD_TOC", addr, size, toc)
        if status == TEE_SUCCESS:
            self.toc_loaded = True
        return status

    def _setup_tmr(self, mc: int, size: int, virt_phy_addr: int, phys: int) -> int:
        if not self.toc_loaded:
            self.error("SETUP_TMR before LOAD_TOC: the TMR size is not known yet")
            return TEE_ERROR_BAD_STATE
        if self.pmfw_centralized and P.GFX_FW_TYPE_SMU not in self.loaded:
            self.error("SETUP_TMR before LOAD_IP_FW of the SMU firmware: with DF C-state management "
                       "centralized to the PMFW the TMR is set up after it (amdgpu_psp.c psp_hw_start)")
            return TEE_ERROR_BAD_STATE
        gmc = self.dev.blocks["GMC"]
        t = gmc.aperture(gmc.hubs["MM"], mc, system_aperture=False)
        problem = None
        if size < TMR_SIZE:
            problem = f"{size:#x} bytes, the TOC needs {TMR_SIZE:#x}"
        elif mc % TMR_ALIGN:
            problem = f"MC address {mc:#x} is not {TMR_ALIGN:#x}-aligned"
        elif t is None or t.system or t.addr + size > self.dev.vram.size:
            problem = f"MC {mc:#x}+{size:#x} is not VRAM"
        elif virt_phy_addr and phys != t.addr:
            problem = f"system_phy_addr {phys:#x} is not the VRAM address {t.addr:#x} of MC {mc:#x}"
        if problem:
            self.error(f"SETUP_TMR: {problem}")
            return TEE_ERROR_BAD_PARAMETERS
        self.tmr, self._tmr_next = (mc, size), 0
        return TEE_SUCCESS

    def _load_ip_fw(self, addr: int, size: int, fw_type: int) -> tuple[int, int]:
        name = fwcheck.fw_type_name(fw_type)
        want = self.firmware.ip_fw_pieces().get(fw_type)
        if want is None:
            self.error(f"LOAD_IP_FW {name}: no such firmware on {self.dev.chip}")
            return TEE_ERROR_NOT_SUPPORTED, 0
        if not self.toc_loaded:
            self.error(f"LOAD_IP_FW {name} before LOAD_TOC")
            return TEE_ERROR_BAD_STATE, 0
        if self.tmr is None and fw_type != P.GFX_FW_TYPE_SMU:
            self.error(f"LOAD_IP_FW {name} before SETUP_TMR: nowhere to put it")
            return TEE_ERROR_BAD_STATE, 0
        smu = self.dev.blocks.get("SMU")
        if fw_type == P.GFX_FW_TYPE_SMU and getattr(smu, "running", False):
            # Assumption (the PSP's rule is not public): upstream never loads PMFW into a running MP1
            # (psp_load_smu_fw skips it "as SMU is always alive" under BACO runtime PM, and has the SMU
            # unload first before a reload in a reset on MP0 11.0.2/11.0.4); here the sOS refuses it.
            self.error(f"LOAD_IP_FW {name} while the SMU firmware runs (MP1_FIRMWARE_FLAGS.INTERRUPTS_ENABLED): "
                       "refused, TEE_ERROR_BAD_STATE; a mode1 or PCI reset stops it first")
            return TEE_ERROR_BAD_STATE, 0
        status = self._payload(f"LOAD_IP_FW {name}", addr, size, want)
        if status != TEE_SUCCESS:
            return status, 0
        self.loaded[fw_type] = self.loaded.get(fw_type, 0) + 1
        at = 0
        if self.tmr is not None:
            at = self.tmr[0] + self._tmr_next
            self._tmr_next = (self._tmr_next + size + 0xFFF) & ~0xFFF
        if fw_type == P.GFX_FW_TYPE_SMU:
            smu = self.dev.blocks.get("SMU")
            if smu is not None:
                smu.firmware_loaded(want.version)   # the header's ucode_version, what GetSmuVersion reports
        return TEE_SUCCESS, at

    def _autoload_rlc(self) -> int:
        missing = self.autoload_required() - set(self.loaded)
        if missing:
            names = ", ".join(sorted(fwcheck.fw_type_name(t) for t in missing))
            self.error(f"AUTOLOAD_RLC with GFX firmware not loaded: {names}; the RLC does not start")
            return TEE_ERROR_BAD_STATE
        if not self.autoload_started:
            self.autoload_started = True
            self.dev.blocks["GFX"].start_autoload()   # the RLC sets RLC_RLCS_BOOTLOAD_STATUS when done
        return TEE_SUCCESS

