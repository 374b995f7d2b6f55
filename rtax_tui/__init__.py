"""rtax: measure the rollout infrastructure tax of coding-agent execution substrates."""

import warnings

__version__ = "0.1.0"

# asyncssh names DSA key classes at import; cryptography 51 deprecates DSA and warns on that
# name, on every command that loads SSH support. It is not the user's doing and nothing they
# can act on, and it broke rtax's one-line errors; rtax never offers DSA keys itself.
warnings.filterwarnings("ignore", message="DSA is deprecated", module=r"asyncssh(\.|$)")
