"""vgrid jdl package."""
