"""The client library: what every entry point (the command line, the HTTP service, MCP,
A2A) does with sessions: resolve a start input, start, read, steer and list them, follow
them live, fork them and run them on a timetable. It prints nothing; the terminal's side is
`cli/`."""
