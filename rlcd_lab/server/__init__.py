"""The Jev-compatible decision server: an rlcd_lab checkpoint behind the typed-decision API.

``rlcd-lab serve --checkpoint DIR`` (:func:`.serving.serve`, or :func:`.app.create_app`
with any ASGI server) answers the Jev wire contract so that the official client works
unchanged: ``POST /v1/systemone``, ``GET /v1/models``, ``GET /health``. docs/server.md
documents the requests, the ``rlcd`` extension, the errors and the options.

The server is transport only (:mod:`rlcd_lab.decide` computes the answers): :mod:`.app`
has the routes and the request pipeline, :mod:`.hardening` the limits and the error
shape, :mod:`.batching` the dynamic batcher and the deadlines' admission,
:mod:`.connections` the uvicorn server, :mod:`.options` every option from the command
line to the app, :mod:`.serving` the command line's entry point.
"""
