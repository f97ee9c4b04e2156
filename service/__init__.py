"""The agent service: an HTTP API, live events and a page over the session workflows.

`app` builds the application, `auth` says who is calling, `routes` and `sse` serve
`/v1/sessions`, `feeds` fans one stream subscription per session out to its watchers,
`pages` serves the page in `static/`.
"""
