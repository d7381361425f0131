"""PSP KM ring fuzzer: command ids, malformed load commands, frames, fences, write pointers and ring control
sent to the PSP of a booted GPU; after each case the next correct command must run (recovering the ring
or the GPU as a driver would).

    python -m tools.fuzz.psp                       # 300 cases on a simulated GPU (seconds)
    python -m tools.fuzz.psp --budget 3000 --seed 2

Case families (each case draws one, from --seed and the case number):
  cmd-id     every psp_gfx_cmd_id, ids it does not define (0, 0xC, 0x1F, 0x23, 0xFF, 0x100, random) and ids
             with the response flag (GFX_CMD_RESPONSE_MASK) set, with a zeroed or random body
  load-args  LOAD_IP_FW, LOAD_TOC and SETUP_TMR through the driver (amdrv.ip.psp.PSP.submit) with one field
             wrong: address 0, unaligned, past VRAM, all ones; size 0, 1, off by one, 4 GiB - 1; unknown
             fw_type; the right size at the wrong address
  frame      a psp_gfx_rb_frame with its command buffer address unmapped, unaligned or past VRAM, its
             fence address unmapped, a fence value repeated, zero or wrapped, or 64 random bytes
  wptr       the write pointer (C2PMSG_67) not a whole frame, past the ring, or not moved
  ring-ctrl  C2PMSG_64: an undefined control command, INIT_GPCOM_RING over a live ring or with a ring size
             that is no whole number of frames, DESTROY_RINGS, then a command

Outcomes: the status the PSP wrote (psp_gfx_if.h: TEE_SUCCESS, TEE_ERROR_NOT_SUPPORTED,
PSP_ERR_UNKNOWN_COMMAND; the other TEE_ERROR_* of the same GlobalPlatform family), or "no answer" (the fence
not written within --timeout), or the driver's PSPError; then how the next command (AUTOLOAD_RLC, which a
booted PSP acknowledges again without effect) ran: at once, after re-creating the KM ring
(psp_v13_0_ring_stop + ring_create, as the driver does when it finds the sOS running), or after a cold
reboot of the GPU (mode1 reset).

Unexpected (seed and case printed, exit status 1): a raw exception from the driver or the simulator, a
case over --case-timeout (a hang), a status that is no psp_gfx_if.h/TEE code, an undefined command id not
answered PSP_ERR_UNKNOWN_COMMAND, no answer where the frame was well-formed (cmd-id, load-args), a driver
error that does not name the status, and a GPU that nothing recovers.
"""
from __future__ import annotations

import argparse
import json
import struct
import sys
import time
import traceback

from amdrv import structs
from amdrv.autogen import psp as P
from amdrv.ip.psp import FRAME, RING_SIZE, STATUS, PSPError, PSPTimeout
from amdrv.firmware import FirmwareError
from tools.fuzz.common import Finding, Tally, add_common_args, case_rng, firmware_missing, sim_bus, sim_chip
from tools.fuzz.firmware import Hang, time_limit

CMD = structs.get(P, "psp_gfx_cmd_resp")
RESP_OFFSET = CMD.offset("resp")
FAMILIES = ("cmd-id", "load-args", "frame", "wptr", "ring-ctrl")
CMD_IDS = [getattr(P, n) for n in P.ENUMS["psp_gfx_cmd_id"]]
UNDEFINED_IDS = (0, 0xC, 0x1F, 0x23, 0xFF, 0x100)
KNOWN_STATUS = set(STATUS) | {P.TEE_SUCCESS}
RESPONSE_FLAG = 0x80000000   # psp_gfx_if.h GFX_CMD_RESPONSE_MASK


def status_name(status: int) -> str:
    return "TEE_SUCCESS" if status == P.TEE_SUCCESS else STATUS.get(status, (f"status {status:#x}",))[0]


class Ring:
    """The fuzzer's own hand on the driver's KM ring: raw command buffers, frames and write pointers."""

    def __init__(self, gpu, timeout: float):
        self.gpu, self.psp, self.dev, self.timeout = gpu, gpu.psp, gpu.dev, timeout

    def mc(self, vram_addr: int) -> int:
        return self.dev.mc_address(vram_addr)

    def submit(self, cmd: bytes, frame: dict | bytes | None = None, wptr: int | None = None,
               wait_fence: bool = True) -> tuple[str, int | None]:
        """Writes a command buffer and one frame at the driver's write pointer, then the write pointer; returns
        ("answered", status) or ("no answer", None) after the timeout."""
        psp = self.psp
        self.dev.vram.write(psp.cmd_addr, cmd.ljust(CMD.size, b"\0")[:CMD.size])
        slot = psp._wptr % (RING_SIZE // 4)
        psp._fence = (psp._fence + 1) & 0xFFFFFFFF
        fields = dict(cmd_buf_addr_lo=self.mc(psp.cmd_addr) & 0xFFFFFFFF, cmd_buf_addr_hi=self.mc(psp.cmd_addr) >> 32,
                      fence_addr_lo=self.mc(psp.fence_addr) & 0xFFFFFFFF,
                      fence_addr_hi=self.mc(psp.fence_addr) >> 32, fence_value=psp._fence)
        if isinstance(frame, bytes):
            raw = frame
        else:
            fields.update(frame or {})
            psp._fence = fields["fence_value"]
            raw = FRAME.pack(**fields)
        self.dev.vram.write(psp.ring_addr + slot * 4, raw)
        psp.flush_hdp()
        psp._wptr = (slot + FRAME.size // 4) % (RING_SIZE // 4) if wptr is None else wptr
        psp.c2pmsg[67].write(psp._wptr)
        if not wait_fence:
            return "sent", None
        deadline = time.monotonic() + self.timeout
        while self.dev.vram.read32(psp.fence_addr) != psp._fence:
            if time.monotonic() > deadline:
                return "no answer", None
            time.sleep(50e-6)
        return "answered", self.dev.vram.read32(psp.cmd_addr + RESP_OFFSET)


def _cmd(cmd_id: int, body: bytes = b"") -> bytes:
    head = CMD.pack(cmd_id=cmd_id)
    at = CMD.offset("cmd")
    return head[:at] + body + head[at + len(body):]


def make_case(rng, family: str, gpu) -> tuple[str, dict]:
    """(description, what to do) of one case."""
    vram = gpu.dev.vram.size
    if family == "cmd-id":
        cid = rng.choice(CMD_IDS + list(UNDEFINED_IDS) + [rng.getrandbits(32), RESPONSE_FLAG | rng.choice(CMD_IDS)])
        body = rng.randbytes(rng.choice((0, 16, 64))) if rng.random() < 0.7 else b""
        return f"cmd id {cid:#x}, {len(body)}-byte body", {"cmd": _cmd(cid, body), "cmd_id": cid}
    if family == "load-args":
        kind = rng.choice(("LOAD_IP_FW", "LOAD_TOC", "SETUP_TMR"))
        addr = rng.choice((0, 1, 0x1000 + 4, vram, vram + (1 << 20), (1 << 64) - 1, gpu.psp.tmr.addr, 1 << 44))
        size = rng.choice((0, 1, 0x1000, 0xFFFFF, 0x100001, 0xFFFFFFFF, 0x1300000))
        if kind == "LOAD_IP_FW":
            fw_type = rng.choice((P.GFX_FW_TYPE_RS64_MEC, P.GFX_FW_TYPE_SMU, 0, 0xFF, rng.getrandbits(32)))
            args = dict(cmd_load_ip_fw=dict(fw_phy_addr_lo=addr & 0xFFFFFFFF, fw_phy_addr_hi=addr >> 32,
                                            fw_size=size, fw_type=fw_type))
            what = f"LOAD_IP_FW type {fw_type:#x} at {addr:#x} size {size:#x}"
        elif kind == "LOAD_TOC":
            args = dict(cmd_load_toc=dict(toc_phy_addr_lo=addr & 0xFFFFFFFF, toc_phy_addr_hi=addr >> 32, toc_size=size))
            what = f"LOAD_TOC at {addr:#x} size {size:#x}"
        else:
            args = dict(cmd_setup_tmr=dict(buf_phy_addr_lo=addr & 0xFFFFFFFF, buf_phy_addr_hi=addr >> 32,
                                           buf_size=size, bitfield=dict(virt_phy_addr=1),
                                           system_phy_addr_lo=addr & 0xFFFFFFFF, system_phy_addr_hi=addr >> 32))
            what = f"SETUP_TMR at {addr:#x} size {size:#x}"
        return what, {"driver": (getattr(P, "GFX_CMD_ID_" + kind), args)}
    if family == "frame":
        how = rng.choice(("cmd unmapped", "cmd unaligned", "cmd past VRAM", "fence unmapped", "fence repeated",
                          "fence zero", "fence wrapped", "random frame"))
        cmd = _cmd(P.GFX_CMD_ID_AUTOLOAD_RLC)
        if how == "random frame":
            return how, {"cmd": cmd, "frame": rng.randbytes(FRAME.size)}
        top = (1 << 47) - 0x1000
        f = {"cmd unmapped": dict(cmd_buf_addr_lo=top & 0xFFFFFFFF, cmd_buf_addr_hi=top >> 32),
             "cmd unaligned": dict(cmd_buf_addr_lo=(gpu.dev.mc_address(gpu.psp.cmd_addr) + 3) & 0xFFFFFFFF),
             "cmd past VRAM": dict(cmd_buf_addr_lo=(gpu.dev.mc_address(vram)) & 0xFFFFFFFF,
                                   cmd_buf_addr_hi=gpu.dev.mc_address(vram) >> 32),
             "fence unmapped": dict(fence_addr_lo=top & 0xFFFFFFFF, fence_addr_hi=top >> 32),
             "fence repeated": dict(fence_value=gpu.psp._fence),
             "fence zero": dict(fence_value=0),
             "fence wrapped": dict(fence_value=0xFFFFFFFF)}[how]
        return how, {"cmd": cmd, "frame": f}
    if family == "wptr":
        how = rng.choice(("half frame", "one dword", "past the ring", "not moved"))
        w = gpu.psp._wptr
        new = {"half frame": w + 8, "one dword": w + 1, "past the ring": RING_SIZE // 4 + 16, "not moved": w}[how]
        return how, {"cmd": _cmd(P.GFX_CMD_ID_AUTOLOAD_RLC), "wptr": new}
    how = rng.choice(("undefined control", "init over a live ring", "init size not frames", "destroy, then a command"))
    return how, {"ctrl": how}


def run_case(ring: Ring, spec: dict) -> tuple[str, bool]:
    """(what happened, whether a well-formed request went unanswered)."""
    psp = ring.psp
    if "driver" in spec:
        cmd_id, args = spec["driver"]
        try:
            psp.submit(cmd_id, "fuzz", **args)
            return "TEE_SUCCESS", False
        except PSPTimeout as e:
            return f"driver: {e}", True
        except PSPError as e:
            if "status 0x" not in str(e):
                raise
            return f"driver PSPError {str(e).split('(')[1].split(':')[0]}", False
    if "ctrl" in spec:
        how = spec["ctrl"]
        try:
            if how == "undefined control":
                psp._ring_ctrl(0xE0000, "an undefined ring control")
            elif how == "init over a live ring":
                psp._ring_ctrl(P.PSP_RING_TYPE__KM << 16, "KM ring creation over a live ring")
            elif how == "init size not frames":
                psp.ring_stop()
                psp.c2pmsg[71].write(RING_SIZE - 4)
                psp._ring_ctrl(P.PSP_RING_TYPE__KM << 16, "KM ring creation")
            else:
                psp.ring_stop()
                return ring.submit(_cmd(P.GFX_CMD_ID_AUTOLOAD_RLC))[0], False
            return "accepted", False
        except PSPTimeout as e:
            return f"driver: {e}", True
        except PSPError as e:
            return "refused: " + str(e).split("failed: ")[-1], False
    answered, status = ring.submit(spec["cmd"], spec.get("frame"), spec.get("wptr"))
    if answered != "answered":
        return answered, "frame" not in spec and "wptr" not in spec
    return status_name(status), False


def recover(ring: Ring, make_gpu) -> tuple[str, Ring]:
    """How the next correct command ran: 'at once', after re-creating the ring, or after a cold reboot."""
    def probe(r: Ring) -> bool:
        try:
            r.psp.submit(P.GFX_CMD_ID_AUTOLOAD_RLC)
            return True
        except PSPError:
            return False
    if probe(ring):
        return "next command ran", ring
    try:
        ring.psp.ring_create(destroy_first=True)
        if probe(ring):
            return "ring re-created", ring
    except PSPError:
        pass
    new = Ring(make_gpu(reset=True), ring.timeout)
    if probe(new):
        return "GPU rebooted", new
    return "unrecoverable", new


def run(seed: int, budget: int, device: str = "am:sim", timeout: float = 0.2, case_timeout: float = 30.0):
    import pcie
    from amdrv.am import AMGPU
    chip = sim_chip(device)
    state = {"gpu": None}

    def make_gpu(reset: bool = False):
        if state["gpu"] is not None:
            state["gpu"].dev.close()
        if chip is not None:   # reset: the same simulated GPU, booted cold (the driver resets it first)
            pci = pcie.open_function("sim", chip, fresh=not reset, bus=sim_bus())
            state["gpu"] = AMGPU.open(pci, cold=True)
        else:
            state["gpu"] = AMGPU.open(device, cold=True)
        state["gpu"].psp.timeout_s = timeout
        return state["gpu"]

    tally = Tally("PSP ring")
    ring = Ring(make_gpu(), timeout)
    try:
        for i in range(budget):
            rng = case_rng(seed, i, "psp")
            family = rng.choice(FAMILIES)
            what, spec = make_case(rng, family, ring.gpu)
            errors_before = len(ring.dev.pci.dev.errors) if chip else 0
            try:
                with time_limit(case_timeout):
                    outcome, unanswered = run_case(ring, spec)
                    after, ring = recover(ring, make_gpu)
            except Hang as e:
                tally.add(family, "hang", what, Finding(seed, i, what, "hang", str(e)))
                ring = Ring(make_gpu(), timeout)
                continue
            except Exception as e:   # noqa: BLE001 - what the fuzzer is for
                detail = "".join(traceback.format_exception_only(e)).strip()
                tally.add(family, f"raw {type(e).__name__}", detail,
                          Finding(seed, i, what, f"raw {type(e).__name__}", detail))
                ring = Ring(make_gpu(), timeout)
                continue
            bad = None
            if unanswered:
                bad = "a well-formed request went unanswered"
            elif outcome.startswith("status "):
                bad = f"{outcome} is no psp_gfx_if.h or TEE status code"
            elif chip and family == "cmd-id" and (spec["cmd_id"] not in CMD_IDS) \
                    and outcome != "PSP_ERR_UNKNOWN_COMMAND":
                bad = f"undefined command id {spec['cmd_id']:#x} answered {outcome}, not PSP_ERR_UNKNOWN_COMMAND"
            elif after == "unrecoverable":
                bad = "the next command failed even after a cold reboot"
            sim_note = ""
            if chip and len(ring.dev.pci.dev.errors) > errors_before:
                sim_note = f" (simulator: {ring.dev.pci.dev.errors[errors_before].message})"
            tally.add(family, f"{outcome}; {after}", what + sim_note,
                      Finding(seed, i, what, outcome, bad) if bad else None)
    finally:
        if state["gpu"] is not None:
            state["gpu"].dev.close()
    return tally


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tools.fuzz.psp", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    add_common_args(ap, budget=300)
    ap.add_argument("--timeout", type=float, default=None,
                    help="seconds to wait for a fence (default 0.2 on the simulator, 2 on a GPU)")
    ap.add_argument("--case-timeout", type=float, default=30.0)
    args = ap.parse_args(argv)
    timeout = args.timeout or (0.2 if sim_chip(args.device) else 2.0)
    t0 = time.monotonic()
    try:
        tally = run(args.seed, args.budget, args.device, timeout, args.case_timeout)
    except FirmwareError as e:
        return firmware_missing(ap.prog, e)
    print(tally.table(example_width=110))
    print(f"\nseed {args.seed}: {tally.cases} cases on {args.device}, {len(tally.findings)} unexpected, "
          f"{time.monotonic() - t0:.1f} s")
    if args.json:
        tally.write_json(args.json)
    return 1 if tally.findings else 0


if __name__ == "__main__":
    sys.exit(main())
