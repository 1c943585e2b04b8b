"""``herald doctor``: findings about a home, one module per thing checked (``run`` runs them all).
"""
