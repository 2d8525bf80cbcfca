"""How a request arrives and is answered, before and around any route: the one error shape and
its handlers (`errors`), the one JSON reader (`bodies`), keys and rate limits (`access`), what
happens on the connection (`connections`), the app's middleware (`middleware`), metrics
(`metrics`) and the truthful OpenAPI document (`openapi`)."""
