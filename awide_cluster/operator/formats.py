"""What ``status``/``cards`` print in (``--format``) and the screen they fit: constants the CLI
needs to declare its options, apart from the renderer (``render.py``: the model, PyYAML), so
that ``awide-cluster --help`` imports neither."""

FORMATS = ("table", "wide", "json", "yaml")     # and "brief" (status --brief): one line
WIDTH, HEIGHT = 80, 24      # the screen ``table`` fits (a terminal's size under --watch)
