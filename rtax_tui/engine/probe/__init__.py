"""The boundary probe's runs: scripts run inside an environment (`scripts`), the host's
sentinels (`host`, `state`), the pool-reuse checks (`reuse`), the run itself (`run`) and
the verdicts (`classify`). The checks' catalogue is data, in `rtax_tui.model.checks`; the
probe's document, folded from its events, is `rtax_tui.model.probedoc`.
"""
