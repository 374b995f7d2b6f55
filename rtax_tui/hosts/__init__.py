"""Hosts run commands for drivers: locally now, over SSH later (same interface)."""

from rtax_tui.hosts.local import CompletedProcess, LocalHost

__all__ = ["CompletedProcess", "LocalHost"]
