"""Fuzzers of driverless (docs/fuzzing.md): each one command with --seed, --budget and a results table.

    python -m tools.fuzz.firmware --budget 100000    # firmware-blob mutations: parsers, then full boots
    python -m tools.fuzz.smu                         # every SMU message id with argument patterns
    python -m tools.fuzz.psp                         # PSP KM ring commands, malformed frames and fences
    python -m tools.fuzz.state --budget 1000         # SIGKILL anywhere, then a fresh process must compute
    python -m tools.fuzz.packets                     # PM4 and SDMA streams, random wave code

tools.fuzz.common holds what they share (arguments, outcome tally, table printing).
"""
