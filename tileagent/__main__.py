"""Run the CLI: python -m tileagent."""

from tileagent.cli import app

app()
