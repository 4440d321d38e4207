from tileagent.cli import app

app()
