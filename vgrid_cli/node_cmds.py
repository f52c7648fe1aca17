"""``vgrid node-cleanup --config node.toml``: after a node agent killed for good (SIGKILL, a lost
host) and never to be restarted on that work directory, unmount its quota and spare quota file
systems and delete the spare images (:mod:`vwn_agents.node_cleanup`; docs/operations.md,
"Stopping a site"). A thin click adapter; exit 1 while a node agent runs on the directory, 2 on
a bad configuration.
"""
from __future__ import annotations

import json

import click

from .common import exit_on


@click.command("node-cleanup")
@click.option("--config", "config_file", required=True, type=click.Path(exists=True, dir_okay=False),
              help="the node agent's TOML configuration (its node name and work_dir)")
@click.option("--json", "as_json", is_flag=True, help="print the result as JSON")
def node_cleanup_cmd(config_file: str, as_json: bool) -> None:
    """Unmount what a stopped node agent left below its work_dir (its restart would adopt it)."""
    from vgrid_runtime.config import ConfigError
    from vwn_agents.node_cleanup import cleanup
    from vwn_agents.node_config import NodeAgentConfig

    @exit_on((ConfigError, 2), (FileNotFoundError, 2), (RuntimeError, 1))
    def run():
        config = NodeAgentConfig.from_toml(config_file)
        if not config.work_dir:
            raise ConfigError(f"{config_file}: no work_dir: the agent kept nothing to clean up")
        result = cleanup(config.work_dir, config.node)
        if as_json:
            click.echo(json.dumps(result, indent=2))
        else:
            click.echo(f"node {config.node}: {len(result['unmounted'])} mount(s) unmounted, "
                       f"{result['spares_removed']} spare file(s) removed below {config.work_dir}")
            for point, error in result["failed"].items():
                click.echo(f"cannot unmount {point}: {error}", err=True)
        if result["failed"]:
            raise SystemExit(1)
    run()
