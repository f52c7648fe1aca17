"""vgrid infosys package."""
