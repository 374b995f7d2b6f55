"""rtax: measure the rollout infrastructure tax of coding-agent execution substrates."""

__version__ = "0.1.0"
