"""What the routes share, so that no route imports another: the one request context every
handler takes (`context`), the request fields several routes declare (`requests`), the
translation job a body asks for (`jobs`), marked text (`markup`), the attention maps of a
translation (`maps`) and the file store and job board (`file_jobs`)."""
