"""nvdrv: the NVIDIA backend of hcq (docs/nv.md), through the NVIDIA kernel module's RM ioctls
(nvdrv.device, nvdrv.rmapi, nvdrv.ioctl, nvdrv.pushbuf): kernels compiled by NVRTC (nvdrv.nvrtc) and
loaded from their cubin (nvdrv.cubin)."""
