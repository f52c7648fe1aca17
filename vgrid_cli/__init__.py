"""The `vgrid` command line: every part's commands, the demo and the process launcher."""
