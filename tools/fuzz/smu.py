"""SMU message fuzzer: every message id of the SMU 13.0.0 interface with argument patterns, and the table a
reverse engineer wants: per id its name, the response code to each argument, what came back in the
argument register, and what changed.

    python -m tools.fuzz.smu                        # every id 0..0x4C and beyond, 9 patterns each (simulator)
    python -m tools.fuzz.smu --budget 2000 --seed 3 # then random arguments until 2000 messages
    python -m tools.fuzz.smu --device am:0000:03:00.0              # a real GPU: the safe list only
    python -m tools.fuzz.smu --device am:0000:03:00.0 --dangerous  # every id (resets, power, clocks, DMA)

Ids: 0 through PPSMC_Message_Count (amdrv.autogen.smu_13_0_0, from smu_v13_0_0_ppsmc.h) and a few past it
(0xFF, 0x100, 0xFFFF, 0xFFFFFFFF). Arguments: 0, 1, all ones, bit 31, 0xFFFF, PPCLK 1 index 0, PPCLK 0
index 0xFF (the level count), PPCLK 0xFF, then random values. After a message with an effect the next one starts on a
freshly booted GPU (a new simulated one; a real one reopened), so that every row's effect is its own.

Per message (driver side, amdrv.ip.smu.SMU.send: the smu_cmn.c mailbox protocol): the response in
C2PMSG_90 (OK, Failed, UnknownCmd, CmdRejectedPrereq, CmdRejectedBusy, DebugDataDumpEnd, or none within
--timeout), C2PMSG_82 afterwards ("echo" when it still holds the argument), and the effect: the running
feature mask, the PPT limit and whether the SMU and the PSP's secure OS still answer, read before and after
with messages on the safe list.

Safe list (the default on a real GPU; every id is sent to the simulator): the getters and TestMessage, and
TransferTableSmu2Dram (the SMU writes a table into the driver's own buffer). Everything else can reset the
GPU (Mode1Reset, TriggerVFFLR), power parts of it off (BACO, ArmD3, PrepareMp1ForUnload, Power{Up,Down}*),
change clocks, voltages, limits or thermal protection (Set*ByFreq, SetPptLimit, features, SetThrottlerMask,
RunDcBtc, Dram2Smu tables), or point the SMU's DMA anywhere (Set*DramAddr*, DramLog*, STBtoDram*), and needs
--dangerous there. Ids the header does not name are not on the safe list either: the firmware may know them.

Unexpected (printed with seed and case, exit status 1): a raw exception in the driver or the simulator, a
response that is no PPSMC_Result code, an id the header does not name answered other than UnknownCmd (on the
simulator, which implements that header), and no response to a message that is not a reset.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
import traceback
from dataclasses import dataclass, field

from amdrv.autogen import smu_13_0_0 as S
from amdrv.ip.smu import MSG_NAMES, RESULTS, SMUError, SMUTimeout
from amdrv.firmware import FirmwareError
from tools.fuzz.common import Finding, Tally, add_common_args, case_rng, firmware_missing, sim_bus, sim_chip

SAFE = {S.PPSMC_MSG_TestMessage, S.PPSMC_MSG_GetSmuVersion, S.PPSMC_MSG_GetDriverIfVersion,
        S.PPSMC_MSG_GetRunningSmuFeaturesLow, S.PPSMC_MSG_GetRunningSmuFeaturesHigh, S.PPSMC_MSG_GetMinDpmFreq,
        S.PPSMC_MSG_GetMaxDpmFreq, S.PPSMC_MSG_GetDpmFreqByIndex, S.PPSMC_MSG_GetVoltageByDpm,
        S.PPSMC_MSG_GetDcModeMaxDpmFreq, S.PPSMC_MSG_GetPptLimit, S.PPSMC_MSG_GetDebugData,
        S.PPSMC_MSG_TransferTableSmu2Dram}
# Why the others are off the safe list, for the table (the first matching word of the name).
DANGER = (("Mode1Reset", "resets the whole GPU"), ("VFFLR", "resets a function"),
          ("Baco", "powers the chip off (BACO)"), ("ArmD3", "arms D3 power-off"),
          ("PrepareMp1ForUnload", "stops the power firmware"), ("PowerDown", "powers an engine off"),
          ("PowerUp", "powers an engine on"), ("DramAddr", "points the SMU's DMA at an address"),
          ("DramSize", "sizes an SMU DMA region"), ("Dram2Smu", "overwrites an SMU table (clocks, voltages)"),
          ("STBtoDram", "makes the SMU write host memory"), ("ByFreq", "changes clock limits (and voltage)"),
          ("PptLimit", "changes the power limit"), ("Features", "switches power features (thermal, fan)"),
          ("Throttler", "masks thermal protection"), ("RunDcBtc", "runs voltage calibration"),
          ("BadMemoryPages", "records retired memory pages"))
PATTERNS = (0, 1, 0xFFFFFFFF, 0x80000000, 0xFFFF, S.PPCLK_SOCCLK << 16, S.PPCLK_GFXCLK << 16 | 0xFF,
            0xFF << 16)
EXTRA_IDS = (0xFF, 0x100, 0xFFFF, 0xFFFFFFFF)
RESET_MSGS = {S.PPSMC_MSG_Mode1Reset, S.PPSMC_MSG_PrepareMp1ForUnload, S.PPSMC_MSG_TriggerVFFLR,
              S.PPSMC_MSG_EnterBaco, S.PPSMC_MSG_ArmD3}
RESULT_NAMES = {code: name for code, (name, _) in RESULTS.items()}


def danger(msg: int) -> str | None:
    """Why a message is off the safe list; None when it is on it."""
    if msg in SAFE:
        return None
    name = MSG_NAMES.get(msg)
    if name is None:
        return "not in the interface header (the firmware may know it)"
    return next((why for word, why in DANGER if word in name), "changes power-management state")


def ids() -> list[int]:
    return list(range(0, S.PPSMC_Message_Count + 1)) + list(EXTRA_IDS)


@dataclass
class Row:
    msg: int
    name: str
    danger: str | None
    results: list = field(default_factory=list)   # (arg, response name, out, effect)


class Target:
    """A booted GPU whose SMU the fuzzer talks to; opened again whenever a message broke it."""

    def __init__(self, device: str, timeout: float):
        self.device, self.timeout, self.gpu = device, timeout, None
        self.chip = sim_chip(device)

    def open(self):
        import pcie
        from amdrv.am import AMGPU
        self.close()
        if self.chip is not None:
            self.gpu = AMGPU.open(pcie.open_function("sim", self.chip, fresh=True, bus=sim_bus()), cold=True)
        else:
            self.gpu = AMGPU.open(self.device)
        self.gpu.smu.timeout_s = self.timeout
        return self.gpu

    def close(self):
        if self.gpu is not None:
            try:
                self.gpu.dev.close()
            finally:
                self.gpu = None

    def state(self) -> dict:
        """What the safe getters say (None where the SMU does not answer), and whether the sOS runs."""
        smu, out = self.gpu.smu, {}
        for key, msg, arg in (("smu", S.PPSMC_MSG_GetSmuVersion, 0),
                              ("features_hi", S.PPSMC_MSG_GetRunningSmuFeaturesHigh, 0),
                              ("features_lo", S.PPSMC_MSG_GetRunningSmuFeaturesLow, 0),
                              ("ppt_w", S.PPSMC_MSG_GetPptLimit, 0)):
            try:
                out[key] = smu.query(msg, arg)
            except SMUError as e:
                if isinstance(e, SMUTimeout) or e.result == 0xFFFFFFFF:   # no firmware, or off the bus (reset)
                    out[key] = None
                    smu._idle = False
                    break
                out[key] = "error"
        out["sos"] = self.gpu.psp.sos_alive()
        return out


def effect(before: dict, after: dict) -> str:
    if before.get("smu") is not None and after.get("smu") is None:
        return "SMU stopped answering" + ("; the PSP's sOS is gone (GPU reset)" if not after["sos"] else "")
    changed = [f"{k} {before.get(k)!r}->{after.get(k)!r}" for k in after if after.get(k) != before.get(k)]
    return ", ".join(changed) or "-"


def send(gpu, msg: int, arg: int) -> tuple[str, int | None]:
    """(response name, C2PMSG_82 afterwards) of one raw message."""
    smu = gpu.smu
    try:
        out = smu.send(msg, arg, read_arg=True)
        return "OK", out
    except SMUTimeout:
        smu._idle = False
        return "no response", None
    except SMUError as e:
        return RESULT_NAMES.get(e.result, f"code {e.result:#x}"), smu.arg_reg.read()


def run(seed: int, budget: int | None, device: str = "am:sim", dangerous: bool = False,
        timeout: float = 0.3, only: list[int] | None = None) -> tuple[Tally, list[Row]]:
    chip = sim_chip(device)
    msgs = only or ids()
    plan = [(m, a) for m in msgs for a in PATTERNS]
    budget = len(plan) + len(msgs) if budget is None else budget
    while len(plan) < budget:   # then random arguments, id by id
        i = len(plan)
        rng = case_rng(seed, i, "smu")
        plan.append((msgs[i % len(msgs)], rng.getrandbits(32)))
    plan = sorted(plan[:budget], key=lambda p: msgs.index(p[0]))   # stable: patterns first, then random
    tally, rows = Tally("SMU messages"), {}
    target = Target(device, timeout)
    try:
        for index, (msg, arg) in enumerate(plan):
            name = MSG_NAMES.get(msg, f"(unnamed {msg:#x})")
            why = danger(msg)
            row = rows.setdefault(msg, Row(msg, name, why))
            if why and chip is None and not dangerous:
                row.results.append((arg, "skipped (--dangerous)", None, why))
                tally.add("not sent", "skipped: off the safe list", f"{name}: {why}")
                continue
            group = "unnamed ids" if msg not in MSG_NAMES else ("safe list" if why is None else "others")
            try:
                if target.gpu is None:
                    target.open()
                before = target.state()
                if before["smu"] is None:
                    target.open()
                    before = target.state()
                resp, out = send(target.gpu, msg, arg)
                if msg in RESET_MSGS and resp == "OK":
                    time.sleep(0.05)   # the reset follows the answer
                after = target.state()
            except FirmwareError:
                raise            # no GPU to send to: not an outcome of this message (main says so once)
            except Exception as e:   # noqa: BLE001 - what the fuzzer is for
                detail = "".join(traceback.format_exception_only(e)).strip()
                row.results.append((arg, f"raw {type(e).__name__}", None, detail))
                tally.add(group, f"raw {type(e).__name__}", detail,
                          Finding(seed, index, f"{name}({arg:#x})", f"raw {type(e).__name__}", detail))
                target.gpu = None
                continue
            eff = effect(before, after)
            row.results.append((arg, resp, out, eff))
            bad = None
            if resp.startswith("code "):
                bad = f"response {resp} is no PPSMC_Result code"
            elif chip is not None and msg not in MSG_NAMES and resp != "UnknownCmd":
                bad = f"an id smu_v13_0_0_ppsmc.h does not name was answered {resp}, not UnknownCmd"
            elif resp == "no response" and msg not in RESET_MSGS:
                bad = "no response within the timeout"
            outcome = resp if not (msg in RESET_MSGS and "stopped" in eff) else f"{resp}, then reset"
            tally.add(group, outcome, f"{name}({arg:#x}) -> {resp}, C2PMSG_82 "
                      f"{'-' if out is None else hex(out)}; {eff}",
                      Finding(seed, index, f"{name}({arg:#x})", resp, bad) if bad else None)
            if eff != "-":
                target.close()   # next message: a fresh boot, so that its effect is its own

    finally:
        target.close()
    return tally, list(rows.values())


def row_table(rows: list[Row]) -> str:
    """One line per id: the response to each argument, the first output, echo, the effects seen."""
    lines = [f"{'id':>10}  {'name':42} {'safe':4}  responses (argument: response)  | C2PMSG_82 | effect"]
    for r in rows:
        sent = [x for x in r.results if not x[1].startswith("skipped")]
        if not sent:
            lines.append(f"{r.msg:#10x}  {r.name:42} {'no':4}  not sent: {r.danger} (--dangerous)")
            continue
        resp = " ".join(f"{a:#x}:{v}" for a, v, _, _ in sent[:len(PATTERNS)])
        outs = [(a, o) for a, _, o, _ in sent if o is not None]
        echo = "echo" if outs and all(a == o for a, o in outs) else (hex(outs[0][1]) if outs else "-")
        effs = sorted({e for _, _, _, e in sent if e != "-"})
        lines.append(f"{r.msg:#10x}  {r.name:42} {'yes' if r.danger is None else 'no':4}  {resp}  | {echo} | "
                     f"{'; '.join(effs) or '-'}")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tools.fuzz.smu", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    add_common_args(ap, budget=None)
    ap.add_argument("--dangerous", action="store_true",
                    help="on a real GPU, also send the messages off the safe list (resets, power, clocks, DMA)")
    ap.add_argument("--timeout", type=float, default=None,
                    help="seconds to wait for each response (default 0.3 on the simulator, 2 on a GPU)")
    ap.add_argument("--rows", action="store_true", help="also print the per-id table")
    ap.add_argument("--ids", help="only these message ids, comma-separated (0x2f,3,...)")
    args = ap.parse_args(argv)
    timeout = args.timeout or (0.3 if sim_chip(args.device) else 2.0)
    t0 = time.monotonic()
    only = [int(x, 0) for x in args.ids.split(",")] if args.ids else None
    try:
        tally, rows = run(args.seed, args.budget, args.device, args.dangerous, timeout, only)
    except FirmwareError as e:
        return firmware_missing(ap.prog, e)
    if args.rows:
        print(row_table(rows))
        print()
    print(tally.table())
    print(f"\nseed {args.seed}: {tally.cases} messages on {args.device}, {len(tally.findings)} unexpected, "
          f"{time.monotonic() - t0:.1f} s")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"seed": args.seed, "device": args.device,
                       "rows": [{"id": r.msg, "name": r.name, "safe": r.danger is None, "why": r.danger,
                                 "results": [{"arg": a, "response": v, "c2pmsg_82": o, "effect": e}
                                             for a, v, o, e in r.results]} for r in rows],
                       "unexpected": [vars(x) for x in tally.findings]}, f, indent=2)
    return 1 if tally.findings else 0


if __name__ == "__main__":
    sys.exit(main())
