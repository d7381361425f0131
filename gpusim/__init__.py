"""gpusim: simulated Navi31/Navi33 hardware behind the `pcie` interface (docs/architecture.md, docs/simulator.md).

Drivers reach it only through the pcie provider "sim" (gpusim.provider.open_function). The framework
block models build on is gpusim.device; docs/simulator.md says what is modeled and from which facts.
"""
