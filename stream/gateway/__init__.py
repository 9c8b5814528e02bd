"""The gateway for UI backends: HTTP + Server-Sent Events over what the worker publishes.

``stream serve`` runs it. One Redis pattern subscription per process feeds every SSE
client in-process (``hub``); reads of the latest values go through ``store``; ``meter`` is
the pure model of what a UI draws (also used by ``stream watch``); ``static/`` holds the
page, served as is (no build step).
"""
