"""Shiftlight's custom resources: pydantic models (``models``) and the CRDs generated from them (``schema``)."""
