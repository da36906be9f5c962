"""The pure differential-privacy core: no Django, only numpy and the standard library.

Devices and servers both use it: mechanisms (privatize, debias, variance), amplification and
minimum cohorts, prime-field secret sharing, and the one-hot encodings of recipe schemas.

"Seed 000" … "seed 004" in comments name the source documents: docs/privacy.md, References.
"""
