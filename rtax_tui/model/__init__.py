"""The bottom layer: what a run is and what it leaves behind.

Phases, channels, specs and results (`spec`), the typed error kinds (`errors`), the
recording's events and file format (`events`, `recording`), the one fold from events to
results (`fold`), the boundary checks' catalogue (`checks`), safe reading of input files
(`inputs`), phase-wait attribution (`waits`) and the run lock (`runlock`). It imports no
other rtax package: every layer above reads and writes these types.
"""
