"""DSL templates, one module per template: each has ``VARIANTS`` (label, knobs), most likely first, and
``render(match, knobs) -> str``, the candidate module's text (``common`` holds the shared pieces)."""
