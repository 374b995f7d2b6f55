"""The command line: `rtax` and its subcommands (`cli`), headless runs (`headless`),
`rtax doctor`, `rtax traj`, `rtax plot`, `rtax serve`, and the argument types and host
flags they share. The top layer, beside the console.
"""
