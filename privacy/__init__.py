"""The pure differential-privacy core: no Django, only numpy and the standard library.

Devices and servers both use it: mechanisms (privatize, debias, variance), amplification and
minimum cohorts, prime-field secret sharing, and the one-hot encodings of recipe schemas.
"""
