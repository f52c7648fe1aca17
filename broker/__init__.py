"""vgrid broker package."""
