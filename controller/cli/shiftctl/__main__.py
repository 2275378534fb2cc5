"""``python -m controller.cli.shiftctl.commands``."""

from controller.cli.shiftctl.commands import app

app()
