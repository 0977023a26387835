"""Admission: the validating webhook (kopf serves it) and its certificates; what it checks is tensorkiln.review."""
