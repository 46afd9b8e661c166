"""The client library: routes, producer, pull and push consumers, on trio."""
