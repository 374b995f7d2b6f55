"""The boundary probe's runs: scripts run inside an environment (`scripts`), the host's
sentinels (`host`, `state`), the pool-reuse checks (`reuse`) and the run itself (`run`).
The checks' catalogue and verdicts are data, in `rtax_tui.model.checks`.
"""
