"""The web UI (``durable-rpc ui``): a separate process that is an ordinary gRPC client of
the server, drawing server-rendered pages. Its modules are imported explicitly."""
