"""Interrupt waits: the GPU's MSI through the transport's eventfd, and the fence interrupts that wake a wait.

    irq, how = Interrupts.enable(gpu, compute_queue, sdma_queue)   # None and the reason where polling
    woke = irq.wait(0.1)        # True: an interrupt came (the eventfd's count is consumed)
    irq.disable()

Facts (drivers/gpu/drm/amd/amdgpu):
- amdgpu_irq_init asks the PCI core for one MSI/MSI-X vector (pci_alloc_irq_vectors); ih_v6_0_irq_init
  then sets IH_RB_CNTL.RPTR_REARM = msi_enabled. A userspace driver gets the vector from VFIO
  (VFIO_DEVICE_SET_IRQS: the vector signals an eventfd; pcie.PCIFunction.enable_msi).
- amdgpu_fence_emit asks every fence for an interrupt (AMDGPU_FENCE_FLAG_INT): on the compute ring
  RELEASE_MEM INT_SEL 2, "after write confirm" (gfx_v11_0_ring_emit_fence); on SDMA a TRAP packet after the
  fence (sdma_v6_0_ring_emit_fence, INT_CONTEXT 0 outside MES).
- The interrupt sources are enabled per pipe and engine when a ring starts (amdgpu_fence_driver_start_ring
  -> amdgpu_irq_get): gfx_v11_0_set_compute_eop_interrupt_state sets CP_ME1_PIPEn_INT_CNTL
  TIME_STAMP_INT_ENABLE and GENERIC0_INT_ENABLE for the ring's pipe; sdma_v6_0_set_trap_irq_state sets
  SDMAn_CNTL.TRAP_ENABLE.
- gfx_v11_0_eop_irq decodes the IV: client GRBM_CP, source CP_EOP_INTERRUPT, ring_id me 3:2, pipe 1:0,
  queue 6:4. sdma_v6_0_process_trap_irq: client GFX, source SDMA_TRAP.
- amdgpu_fence_fallback: a timer (AMDGPU_FENCE_JIFFIES_TIMEOUT, HZ / 2) processes the fences in case an
  interrupt was lost, and warns "Fence fallback timer expired" when that signalled one.

The AM driver asks fences for interrupts only on a device that waits on them (where enable() succeeded),
so a polled device's packets are what they were. Where the transport offers no eventfd (sysfs, USB, the
simulator on its stepped clock) the driver polls (amdrv.hcq.device._wait) and `how` says why.
"""
from __future__ import annotations

import os
import select

from amdrv.autogen import ih as IHIDS

FALLBACK_S = 0.5     # AMDGPU_FENCE_JIFFIES_TIMEOUT
LATE_IRQ_S = 0.1     # after a wait that timed out and found the fence done: how long its interrupt may trail it


class InterruptLost(RuntimeWarning):
    """A fence was found done by the fallback check, not by its interrupt (amdgpu's "Fence fallback timer
    expired"): the interrupt was lost or its source is off, and every wait now costs the fallback period."""


def is_fence_interrupt(iv) -> bool:
    """Whether an IV (amdrv.ip.ih.IVEntry) is a fence's: a CP end-of-pipe or an SDMA trap."""
    return ((iv.client_id == IHIDS.SOC21_IH_CLIENTID_GRBM_CP and iv.src_id == IHIDS.GFX_11_0_0__SRCID__CP_EOP_INTERRUPT)
            or (iv.client_id == IHIDS.SOC21_IH_CLIENTID_GFX and iv.src_id == IHIDS.GFX_11_0_0__SRCID__SDMA_TRAP))


class Interrupts:
    """MSI vector 0 on an eventfd, with the EOP interrupt of a compute queue's pipe and the trap interrupt
    of an SDMA queue's engine enabled."""

    def __init__(self, gpu, compute, sdma, fd: int):
        self.gpu, self.compute, self.sdma, self.fd = gpu, compute, sdma, fd
        self._poll = select.poll()
        self._poll.register(fd, select.POLLIN)
        self.received = 0       # eventfd counts consumed: interrupts the device sent
        self.fallbacks = 0      # waits the fallback check completed (InterruptLost)

    @classmethod
    def enable(cls, gpu, compute, sdma) -> tuple[Interrupts | None, str]:
        """amdgpu_irq_init's MSI and the fence interrupt sources; (None, why) where the transport has none.
        GC registers are written: the caller holds GFX powered (amdrv.monitor.GfxOff)."""
        pci = gpu.dev.pci
        fd = pci.enable_msi()
        if fd is None:
            return None, f"polling: {pci.msi_unavailable}"
        irq = cls(gpu, compute, sdma, fd)
        try:
            gpu.ih.regs.IH_RB_CNTL.update(RPTR_REARM=1)     # ih_v6_0_irq_init with MSI
            irq.sources(True)
        except BaseException:
            pci.disable_msi()
            raise
        return irq, "interrupts: MSI on an eventfd"

    def sources(self, on: bool) -> None:
        """The compute pipe's EOP and the SDMA engine's trap interrupt on or off (also after a reset, as
        amdgpu_irq_gpu_reset_resume_helper applies the sources' states again)."""
        gc = self.gpu.dev.reg("GC")
        gc.reg(f"CP_ME1_PIPE{self.compute.pipe}_INT_CNTL").update(TIME_STAMP_INT_ENABLE=int(on),
                                                                  GENERIC0_INT_ENABLE=int(on))
        self.sdma._reg("CNTL").update(TRAP_ENABLE=int(on))

    def wait(self, timeout: float) -> bool:
        """Blocks until the device sends an interrupt or `timeout` seconds pass; True when one came (and
        consumes the eventfd's count: an interrupt that came before the call also returns at once)."""
        if not self._poll.poll(max(0, int(timeout * 1000 + 0.999))):
            return False
        try:
            self.received += os.eventfd_read(self.fd)
        except BlockingIOError:     # read by someone else between poll and read
            return False
        return True

    def disable(self) -> None:
        """The sources off, RPTR_REARM back, the MSI eventfd closed (hw_fini's amdgpu_irq_put, amdgpu_irq_fini)."""
        try:
            self.sources(False)
            self.gpu.ih.regs.IH_RB_CNTL.update(RPTR_REARM=0)
        finally:
            self._poll.unregister(self.fd)
            self.gpu.dev.pci.disable_msi()
