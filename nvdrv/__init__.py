"""nvdrv: the NVIDIA backend of hcq (docs/nv.md): kernels compiled by NVRTC (nvdrv.nvrtc) and loaded from
their cubin (nvdrv.cubin)."""
