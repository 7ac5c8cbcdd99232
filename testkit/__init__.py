"""Synthesis shared by the tests and the benches (neither imports the other): simulated
fleets (``fleet``). Not part of the installed package."""
