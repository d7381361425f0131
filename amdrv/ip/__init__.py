"""The AM driver's IP blocks, one module each (nbio, gmc, ih, psp, smu, gfx, sdma), all working on an
`amdrv.device.AMDevice` and following one life cycle (`amdrv.ip.base.IPBlock`, amdgpu's amd_ip_funcs)."""
