"""``python -m tileagent.tilelang SCRIPT [ARGS...]``: run a TileLang program with ``import tilelang`` resolved to
TileAgent (``tileagent.compat.run``). Importing this module does nothing else."""

if __name__ == "__main__":
    import sys

    from tileagent.compat.run import main

    sys.exit(main())
