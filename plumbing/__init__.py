"""What the entry points share: the Temporal connection and data converter, the
external payload store, the terminal rendering, and the bundled dev server."""
