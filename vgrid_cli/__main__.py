"""``python -m vgrid_cli`` is the ``vgrid`` command."""
from vgrid_cli.main import main

main()
