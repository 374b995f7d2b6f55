"""Figures drawn for people: Rich tables (`tables`, `reporting`, `pool_render`,
`traj_render`) and matplotlib plots (`plots`), shared by the commands and the console.
"""
