"""What the entry points do with sessions: resolve a start input, start, read, steer and
list them, follow them live, fork them, run them on a timetable, and print them."""
