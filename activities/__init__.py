"""Everything that touches the world: the model, the tools, the transcript store."""
