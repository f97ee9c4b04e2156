"""The command line's terminal side: each `client.py` command (commands.py), what it
prints (render.py) and the live view (watch.py). It reads and steers sessions through the
client library in `sessions/`."""
