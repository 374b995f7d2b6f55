"""The engine: plans, schedules and runs trials through drivers on hosts.

Profiles (`profile`, its schema `profile_schema`, `profile_toml`), the plan and its
scheduling (`plan`, `scheduling`), a run's session (`session`), the trial runner
(`runner`, `lifecycle`), pools (`pool`, `poolspec`), capacity batches (`capacity`),
health of substrates and hosts (`health`), the boundary probe's runs (`probe`) and agent
trajectories as workloads (`traj`). No terminal and no UI: Textual and Rich are never
imported from here.
"""
