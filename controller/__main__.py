from controller.cli.main import app

app()
