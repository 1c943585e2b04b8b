"""From a platform's message to a lane's work: the router, the lanes and their worker
(the inbox it stores messages in is ``gateway.ledger``; what the work becomes is the handlers' business,
``gateway.intake.handling``).
"""
