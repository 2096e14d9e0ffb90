"""The HTTP plumbing around connexion, one job per module; memfit.app stacks them, outermost first:

state.py        puts the server state in the ASGI scope
revision.py     stamps the API revision header on every response
tarpit.py       holds refusals that come as a flood (401, 404, 405, 421 without the token)
host.py         refuses a request whose Host does not name this server (421)
proof.py        answers a challenged /health with the proof that this server holds the token
routing.py      which operation a request is for (method and path): its path template, whether it needs the
                token, takes a body
request_metrics.py counts every request and its latency by route template, method and status (memfit/telemetry.py)
auth.py         refuses a secured operation without the bearer token (401), before any body is read
body.py         reads the body up to its size limit and deadline (413, 408)
concurrency.py  limits the requests worked on at once (503 past it)
plan_limit.py   a plan waits for one of the plan slots before its body is validated (503 past the wait)
json_depth.py   refuses a body the JSON parsers behind the validator would choke on (400)
cancellation.py cancels the request's work when the client goes away or the server stops (499)
direct.py       answers GET /health without connexion's stack
validation.py   connexion's request-body validation, compiled
log_redaction.py keeps query values other than the contract's out of the access log
tally.py        one log line per 10 s for events a flood repeats; spread.py: deadlines spread over their upper half

and beside them: scope.py (what the app puts in the scope for the layers above), problems.py (every problem
document, without connexion), errors.py (connexion's error handler), server.py (uvicorn's settings and each
connection's deadlines and caps). Nothing here imports the handlers, the service or the estimator's answers.
"""
