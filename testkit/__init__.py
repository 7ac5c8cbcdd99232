"""Synthesis shared by the tests and the benches (neither imports the other): simulated
fleets (``fleet``), the simulated server driven without a store and its thermal truth
(``sim``), the real traces' reference equilibrium time (``reference``) and where those traces
are (``traces``). Not part of the installed package."""
