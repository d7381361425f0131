"""driverless: the console command (`driverless info|firmware|demo`, driverless/cli.py); the stack itself is
in amdrv, hcq, pcie, compiler_bridge and gpusim (docs/architecture.md)."""
