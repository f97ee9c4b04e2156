"""Local servers for development, tests and benchmarks: the bundled Temporal dev server, an
S3-compatible server, fakes of the model APIs, and how their processes are stopped."""
