"""The HTTP plumbing around connexion, one job per module; memfit.app stacks them, outermost first:

state.py        puts the server state in the ASGI scope
revision.py     stamps the API revision header on every response
body.py         reads the body up to its size limit and deadline (413, 408)
json_depth.py   refuses a body the JSON parsers behind the validator would choke on (400)
cancellation.py cancels the request's work when the client goes away or the server stops (499)
auth.py         the bearer token check (connexion's x-bearerInfoFunc uses it)
validation.py   connexion's request-body validation, compiled
"""
