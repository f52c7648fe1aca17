"""vgrid vwn_agents package."""
