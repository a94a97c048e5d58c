"""`hopgraph serve`: the HTTP API (app), its tokens (auth), live state and update jobs (state, worker), metrics."""
