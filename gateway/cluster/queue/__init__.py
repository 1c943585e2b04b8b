"""The cluster's work queue: a Redis stream over the stored inbox, each chat in order, who runs what
(and ``/stop`` across processes), and the queue's figures.
"""
