"""amdrv: the AM driver, which boots AMD GPUs from userspace with no kernel driver loaded."""
