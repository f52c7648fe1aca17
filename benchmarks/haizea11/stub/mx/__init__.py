# float-seconds stand-in for eGenix mx (only mx.DateTime), for running Haizea 1.1 in simulation
