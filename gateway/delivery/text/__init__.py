"""The gateway's part of rendering: a model's answer made safe to encode (``sanitize``) before the
platform's renderer (``adapters.base.Capabilities.render``, built from ``adapters.text``) shapes it."""
