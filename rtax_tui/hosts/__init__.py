"""Hosts run commands for drivers: the local machine, or one over SSH (one interface)."""

from rtax_tui.hosts.base import CompletedProcess, Host, Leftover
from rtax_tui.hosts.local import LocalHost

__all__ = ["CompletedProcess", "Host", "Leftover", "LocalHost"]
