"""VM images for VWNs (issue 14, image half): the image repository (``repository``), its client
(``client``), the node image pool with qcow2 overlays (``pool``), the token bucket that
throttles pulls (``tokenbucket``), the node agent's image routes (``node_routes``) and the CE
agent's live staging from the lease engine's transfer schedule (``staging``). docs/vwn.md,
"Image repository, pools and live staging"."""
