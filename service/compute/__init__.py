"""The work that runs off the event loop, with no HTTP in it: the served models behind their
fair scheduler (`engine`, `batching`), the language identifier (`languages`) and the
heatmaps' render thread (`rendering`)."""
