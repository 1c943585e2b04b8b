"""Images and documents sent with a message: prepared once, stored once, re-sent byte for byte."""
