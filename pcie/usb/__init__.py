"""The USB transport, a `pcie` provider: a `pcie.PCIFunction` behind an ASM24xx USB-to-PCIe bridge (docs/usb.md).

protocol: the stock firmware's commands and registers, from public reverse engineering; link: USB Mass
Storage Bulk-Only Transport over pyusb; transport: the PCI function (TLPs, batching, BAR placement, the
DMA window) and the `usb` pcie provider.
"""
