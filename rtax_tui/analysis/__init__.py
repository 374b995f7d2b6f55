"""From recordings to figures: statistics (`stats`), the report and comparisons
(`report`, `pool_report`, `traj_report`) and the list of past runs (`history`). Reads
recordings only through `rtax_tui.model`'s fold; renders nothing.
"""
