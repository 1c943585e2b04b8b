"""What the gateway does with the platform registry (``adapters.registry``): build the adapters of the
platforms whose token is set (``build``) and keep the records an adapter asks for in the database
(``records``). Everything here reads specs (``adapters.spec``); nothing names a platform."""
