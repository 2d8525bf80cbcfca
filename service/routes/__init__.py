"""The routes, one module per route group; each takes the request context (`ContextDep`) and
imports only what lies below it (service/shared, service/http, service/compute), never
another route (tests/test_layers.py)."""
