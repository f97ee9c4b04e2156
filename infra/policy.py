"""How often a tool may run, as a Python tool (`@tool`, activities/tools.py) or an MCP
server's tool (its `policy` in the agent definitions, infra/definitions.py) declares it:

- `read_only`: it changes nothing; retried freely.
- `idempotent`: running it twice has the effect of once (it takes the idempotency key);
  retried with the same key.
- `at_most_once`: never run twice; after a crash its outcome is `unknown`.
"""

from typing import Literal

ToolPolicy = Literal["read_only", "idempotent", "at_most_once"]
